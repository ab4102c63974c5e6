"""X10 — run leases: the pure policy (when a run is due, what closing it records) and the
journal application that keeps the deadlines of its partitions' runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from journal_helpers import Clock, Feeder, completed, to_running

from imprint.contracts.runtime import RunCompleted, RunHeartbeat, RunStage
from imprint.journal import ids
from imprint.journal.conversation import QueueEvent
from imprint.journal.execution import AnswerExecution
from imprint.journal.handling import Context, handle
from imprint.journal.keys import JournalKeys
from imprint.journal.leases import (
    RUNTIME_LOST,
    Lapse,
    LeaseBook,
    LeaseChange,
    LeaseShard,
    lapse,
    lapse_event_id,
)
from imprint.journal.lifecycle import State
from imprint.journal.refusals import RefusalCode
from imprint.shredding import InMemoryKeyring
from imprint.workspace import MemoryWorkspace
from services.common.settings import Settings
from services.journal.application import RuntimeJournal
from services.journal.leases import next_sweep_in
from services.journal.run_leases import LAPSES_PER_UNIT
from tests.support.backends import memory_environment

LEASE = 10.0


# ------------------------------------------------------------------ the book: when a run is due


@pytest.mark.rule("X10")
def test_a_run_is_due_once_its_lease_passed_without_a_renewal() -> None:
    book = LeaseBook(LEASE)
    book.hold("r1", 0, now=100.0)
    book.hold("r2", 1, now=103.0)
    assert book.due(109.9) == []
    assert book.due(110.0) == [("r1", 0)]
    assert book.due(113.0) == [("r1", 0), ("r2", 1)]
    assert book.deadline("r2") == 113.0 and book.deadline("r3") is None


@pytest.mark.rule("X10")
def test_any_renewal_moves_the_deadline_and_the_order_follows_it() -> None:
    book = LeaseBook(LEASE)
    book.hold("r1", 0, now=100.0)
    book.hold("r2", 0, now=101.0)
    assert book.renew("r1", now=105.0)
    assert not book.renew("unknown", now=105.0), "a run this instance keeps no lease of is not renewed"
    assert book.due(111.0) == [("r2", 0)], "r1 was renewed: r2 is now the oldest"
    assert book.due(115.0) == [("r2", 0), ("r1", 0)]
    book.release("r2")
    assert book.due(200.0) == [("r1", 0)]


@pytest.mark.rule("X10")
def test_a_renewal_read_from_an_earlier_clock_never_goes_back_in_time() -> None:
    book = LeaseBook(LEASE)
    book.hold("r1", 0, now=100.0)
    book.renew("r1", now=105.0)
    book.hold("r2", 0, now=104.0)  # its clock was read before r1's renewal
    assert book.due(114.9) == [], "r2 sits behind r1, so it is not due before r1's deadline either"
    assert book.due(115.0) == [("r1", 0), ("r2", 0)]


@pytest.mark.rule("X10")
def test_a_taken_shard_gives_its_open_runs_a_full_lease_and_a_dropped_shard_is_forgotten() -> None:
    book = LeaseBook(LEASE)
    book.hold("kept", 1, now=50.0)
    book.take(1, ["kept", "r-a", "r-b"], now=100.0)
    book.take(2, ["r-c"], now=100.0)
    assert book.deadline("kept") == 60.0, "a deadline this instance keeps already is not reset"
    assert book.deadline("r-a") == book.deadline("r-c") == 110.0, "a taken run: one full lease from the taking"
    book.drop([1])
    assert "r-a" not in book and "kept" not in book and "r-c" in book
    assert book.due(1000.0) == [("r-c", 2)], "only the owner of a shard closes its runs"


@pytest.mark.rule("X10")
def test_a_lease_lasts_more_than_nothing() -> None:
    with pytest.raises(ValueError):
        LeaseBook(0)


# ------------------------------------------------------------------ the policy over a workspace


@pytest.fixture
def handling() -> Context:
    return Context(JournalKeys(InMemoryKeyring()))


def applied(ws: MemoryWorkspace, handling: Context, shard: int, *messages: object) -> list[LeaseChange]:
    changes: list[LeaseChange] = []
    for message in messages:
        changes.extend(handle(ws, message, dataclasses.replace(handling, shard=shard)).leases)
    return changes


def execution(ws: MemoryWorkspace, run_id: str) -> AnswerExecution:
    found = ws.get(AnswerExecution, ids.execution_id(run_id))
    assert found is not None
    return found


@pytest.mark.rule("X10")
def test_an_admission_holds_the_run_in_its_shard_and_its_end_releases_it(handling: Context) -> None:
    ws = MemoryWorkspace()
    assert applied(ws, handling, 3, *to_running("r1")) == [LeaseChange("held", "r1", 3)]
    shard = ws.get(LeaseShard, LeaseShard.id_for(3))
    assert shard is not None and list(shard.runs) == ["r1"]
    assert applied(ws, handling, 3, RunStage(run_id="r1", stage="search")) == [], "progress changes no lease fact"
    assert applied(ws, handling, 3, completed("r1")) == [LeaseChange("released", "r1", 3)]
    assert shard.runs == {}


@pytest.mark.rule("X10")
@pytest.mark.rule("X2")
def test_a_lapse_closes_the_open_run_failed_runtime_lost_and_releases_its_lease(handling: Context) -> None:
    ws = MemoryWorkspace()
    applied(ws, handling, 0, *to_running("r1"))
    ws.pending()

    assert lapse(ws, "r1", 0, LEASE) == Lapse("r1", closed=True)
    recorded = ws.pending()
    ended = [e for e in recorded if isinstance(e, QueueEvent)]
    assert [(e.run_id, e.end, e.reason) for e in ended] == [("r1", "failed", RUNTIME_LOST)], \
        "X12: the lapse ends the question, and the next in its conversation may start"
    recorded = [e for e in recorded if not isinstance(e, QueueEvent)]
    assert [type(e).__name__ for e in recorded] == ["LeaseLapsed", "Transitioned", "Closed", "Released"]
    lapsed, transitioned, closed, _ = recorded
    assert lapsed.reason == RUNTIME_LOST and lapsed.lease_seconds == LEASE and lapsed.event_id == lapse_event_id("r1")
    assert (transitioned.state, transitioned.previous, transitioned.reason) == ("failed", "running", RUNTIME_LOST)
    assert closed.state == "failed" and closed.record is None, "nothing is invented: no completion record"
    ex = execution(ws, "r1")
    assert ex.state is State.FAILED and ex.lapsed == RUNTIME_LOST

    assert lapse(ws, "r1", 0, LEASE) is None, "a second lapse of the same run records nothing"
    assert ws.pending() == []


@pytest.mark.rule("X10")
def test_a_run_that_ended_meanwhile_is_only_released(handling: Context) -> None:
    ws = MemoryWorkspace()
    applied(ws, handling, 0, *to_running("r1"))
    handle(ws, completed("r1"), dataclasses.replace(handling, shard=1))  # its end was handled on another shard: r1 is still held in shard 0
    ws.pending()
    assert lapse(ws, "r1", 0, LEASE) == Lapse("r1", closed=False)
    assert [type(e).__name__ for e in ws.pending()] == ["Released"]
    assert execution(ws, "r1").state is State.COMPLETED


@pytest.mark.rule("X10")
@pytest.mark.rule("X2")
def test_what_the_runtime_sends_after_the_lapse_is_refused_and_recorded(handling: Context) -> None:
    ws = MemoryWorkspace()
    applied(ws, handling, 0, *to_running("r1"))
    beat = RunHeartbeat(run_id="r1", in_flight="model")
    applied(ws, handling, 0, beat)
    assert ws.pending()[-1].__class__.__name__ != "Refused", "a heartbeat of an open run is no fact"
    lapse(ws, "r1", 0, LEASE)
    ws.pending()

    late = [RunHeartbeat(run_id="r1"), RunStage(run_id="r1", stage="writing"), completed("r1")]
    assert applied(ws, handling, 0, *late) == []
    ex = execution(ws, "r1")
    assert [(r.message_type, r.code) for r in ex.refusals] == [
        ("run.heartbeat", RefusalCode.FACT_OUT_OF_STATE.value),
        ("run.stage", RefusalCode.FACT_OUT_OF_STATE.value),
        ("run.completed", RefusalCode.ALREADY_TERMINAL.value),
    ]
    assert ex.state is State.FAILED and ex.record is None, "the late completion changed nothing"


# ------------------------------------------------------------------ the journal keeping the book


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leased(clock: Clock) -> Iterator[RuntimeJournal]:
    app = RuntimeJournal(memory_environment("journal"), keyring=InMemoryKeyring(), lease_seconds=LEASE, clock=clock)
    yield app
    app.close()


@pytest.mark.rule("X10")
def test_the_journal_closes_a_silent_run_and_a_renewed_one_stays_open(leased: RuntimeJournal, clock: Clock) -> None:
    feed = Feeder(leased)
    feed(*to_running("silent"), *to_running("alive", conversation_id="conv-alive"))
    clock.now += LEASE - 1
    leased.renew(["alive"])  # a record of it arrived (a heartbeat, a proposal: decoded or not)
    assert leased.lapse_due() == []
    clock.now += 1

    assert leased.lapse_due() == [Lapse("silent", closed=True)]
    assert leased.execution("silent").state is State.FAILED
    assert leased.execution("alive").state is State.RUNNING
    assert "silent" not in leased.leases and "alive" in leased.leases
    transitions = [(m.state, m.reason) for _, m in leased.announcements(limit=1000)
                   if m is not None and m.type == "run.transitioned" and m.run_id == "silent"]
    assert transitions[-1] == ("failed", RUNTIME_LOST), "announced like any transition, with its reason"
    closed = [m for _, m in leased.announcements(limit=1000) if m is not None and m.type == "run.closed"]
    assert [(m.run_id, m.state) for m in closed] == [("silent", "failed")]
    lapsed = [m for _, m in leased.announcements(limit=1000) if m is not None and m.type == "run.lease_lapsed"]
    assert [(m.run_id, m.reason, m.conversation_id) for m in lapsed] == [("silent", RUNTIME_LOST, "conv-1")]

    clock.now += LEASE
    assert leased.lapse_due() == [Lapse("alive", closed=True)]
    assert leased.lapse_due() == [], "nothing left to close"


@pytest.mark.rule("X10")
def test_a_run_that_ends_is_no_longer_watched(leased: RuntimeJournal, clock: Clock) -> None:
    feed = Feeder(leased)
    feed(*to_running("r1"))
    feed(completed("r1"))
    assert "r1" not in leased.leases
    clock.now += 10 * LEASE
    assert leased.lapse_due() == []
    assert leased.execution("r1").state is State.COMPLETED


@pytest.mark.rule("X10")
def test_only_the_owner_of_a_shard_closes_its_runs_and_a_taken_shard_starts_a_full_lease(
        leased: RuntimeJournal, clock: Clock) -> None:
    feed = Feeder(leased)
    feed(*to_running("r1"))
    leased.drop_shards([0])  # partition 0 went to another instance
    clock.now += 10 * LEASE
    assert leased.lapse_due() == [], "not this instance's lease to end"
    assert leased.take_shards([0]) == 1, "the shard records r1 as open"
    clock.now += LEASE - 0.5
    assert leased.lapse_due() == []
    clock.now += 0.5
    assert leased.lapse_due() == [Lapse("r1", closed=True)]
    assert leased.take_shards([0]) == 0, "the lapse released it from the shard"


@pytest.mark.rule("X10")
def test_a_heartbeat_of_an_open_run_records_no_event(leased: RuntimeJournal) -> None:
    feed = Feeder(leased)
    feed(*to_running("r1"))
    before = leased.execution("r1").version
    feed(RunHeartbeat(run_id="r1", in_flight="tool"), RunHeartbeat(run_id="r1", in_flight="model"))
    assert leased.execution("r1").version == before


@pytest.mark.rule("X10")
def test_a_late_completion_after_the_lapse_is_refused_and_recorded(leased: RuntimeJournal, clock: Clock) -> None:
    feed = Feeder(leased)
    feed(*to_running("r1"))
    clock.now += LEASE
    leased.lapse_due()
    feed(RunCompleted(run_id="r1", outcome="answered", answer_text="late"))
    ex = leased.execution("r1")
    assert ex.state is State.FAILED and ex.record is None
    assert [(r.message_type, r.code) for r in ex.refusals] == [("run.completed", "already_terminal")]


@pytest.mark.rule("X10")
def test_a_shard_with_a_long_history_reloads_from_its_snapshot(leased: RuntimeJournal) -> None:
    feed = Feeder(leased)
    for n in range(150):  # 225 shard events: past the snapshot interval
        feed(*to_running(f"r{n}", message_id=f"m{n}", conversation_id=f"c{n}"))
        if n % 2:
            feed(completed(f"r{n}"))
    leased.drop_shards([0])
    assert leased.take_shards([0]) == 75
    assert leased.snapshots is not None and list(leased.snapshots.get(LeaseShard.id_for(0))), \
        "a taking reads the shard from its latest snapshot, not its whole history"


@pytest.mark.rule("X10")
def test_runs_that_lapse_together_are_each_closed_and_announced_once(leased: RuntimeJournal, clock: Clock) -> None:
    """A wave of lapses (runtimes lost together) spans several units of work of one sweep."""
    feed = Feeder(leased)
    runs = [f"r{n}" for n in range(2 * LAPSES_PER_UNIT + 7)]
    for n, run_id in enumerate(runs):
        feed(*to_running(run_id, message_id=f"m{n}", conversation_id=f"c{n}"))
    clock.now += LEASE
    assert leased.lapse_due() == [Lapse(run_id, closed=True) for run_id in runs]
    assert all(leased.execution(run_id).state is State.FAILED for run_id in runs)
    closed = [m.run_id for _, m in leased.announcements(limit=10_000) if m is not None and m.type == "run.closed"]
    assert closed == runs
    assert len(leased.leases) == 0 and leased.lapse_due() == []
    leased.drop_shards([0])
    assert leased.take_shards([0]) == 0, "every lapse released its run from the shard"


# ------------------------------------------------------------------ the sweeper: when it looks


def sweep_settings(sweep_seconds: float = 1.0) -> Settings:
    return Settings(run_lease_seconds=LEASE, run_lease_sweep_seconds=sweep_seconds)


@pytest.mark.rule("X10")
def test_a_sweeper_with_no_lease_to_keep_sleeps_a_lease_and_a_lease_taken_meanwhile_lapses_no_sooner(
        leased: RuntimeJournal, clock: Clock) -> None:
    settings = sweep_settings()
    asleep = next_sweep_in(leased, settings, swept_at=clock.now)
    assert asleep == LEASE, "nothing is due: it does not look every sweep interval"
    woken_at = clock.now + asleep
    clock.now += 3.0
    Feeder(leased)(*to_running("r1"))  # a run opened while the sweeper sleeps
    assert leased.next_lapse() is not None and leased.next_lapse() >= woken_at, \
        "every lease lasts as long: one taken meanwhile never lapses before the sweeper wakes"


@pytest.mark.rule("X10")
def test_a_sweeper_sleeps_until_the_earliest_lease_lapses_and_a_renewal_pushes_it_back(
        leased: RuntimeJournal, clock: Clock) -> None:
    settings = sweep_settings()
    feed = Feeder(leased)
    feed(*to_running("r1"))
    clock.now += 4.0
    feed(*to_running("r2", message_id="m-r2"))
    swept_at = clock.now
    asleep = next_sweep_in(leased, settings, swept_at)
    assert LEASE - 4.0 <= asleep < LEASE - 4.0 + 0.1, "it wakes when r1's lease lapses"
    clock.now += 1.0
    leased.renew(["r1"])
    asleep = next_sweep_in(leased, settings, swept_at)
    assert LEASE - 1.0 <= asleep < LEASE - 1.0 + 0.1, "r1 renewed: r2 lapses first, later"
    clock.now += asleep
    assert leased.lapse_due() == [Lapse("r2", closed=True)], "woken at r2's deadline, r2 is due, r1 is not"


@pytest.mark.rule("X10")
def test_lapses_due_at_once_are_swept_at_most_once_per_sweep_interval(leased: RuntimeJournal, clock: Clock) -> None:
    settings = sweep_settings(sweep_seconds=2.0)
    Feeder(leased)(*to_running("r1"))
    clock.now += LEASE + 30  # overdue (a lapse that failed stays due): no sweep right after the last one
    assert next_sweep_in(leased, settings, swept_at=clock.now) == 2.0
    assert next_sweep_in(leased, settings, swept_at=clock.now - 5.0) == 0.0, "a sweep interval passed: at once"

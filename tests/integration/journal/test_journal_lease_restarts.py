"""X10 on each store backend: the leases of open runs survive a journal's restart (the shard
records which runs are open), only the instance that owns a shard closes its runs, and
two instances that both think they own it close a run once."""

from __future__ import annotations

import threading

import pytest
from journal_helpers import Clock, Feeder, leased, to_running

from imprint.contracts.runtime import RunHeartbeat
from imprint.contracts.topics import Topic
from imprint.journal import ids
from imprint.journal.leases import RUNTIME_LOST, Lapse
from imprint.journal.lifecycle import State
from services.common.backends import backend_for
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.journal.application import RuntimeJournal
from services.journal.run_leases import LAPSES_PER_UNIT

pytestmark = pytest.mark.integration

LEASE = 120.0


def announced(journal: RuntimeJournal, run_id: str) -> list[tuple[str, str | None]]:
    return [(m.type, getattr(m, "state", None)) for _, m in journal.announcements(limit=1000)
            if m is not None and m.run_id == run_id and not m.type.startswith("conversation.")]


@pytest.mark.rule("X10")
def test_a_restarted_journal_still_closes_the_runs_its_predecessor_left_open(open_journal) -> None:
    clock = Clock()
    first = leased(open_journal(), clock)
    Feeder(first).send(*to_running("r-lost"), *to_running("r-other", message_id="m-other", conversation_id="conv-2"),
                       partition=0)
    first.close()  # the process is gone, and the deadlines it held in memory with it

    restarted = leased(open_journal(), clock)
    clock.now += 10 * LEASE
    assert restarted.lapse_due() == [], "a journal that was given no partition closes nothing"
    assert restarted.take_shards([0]) == 2, "its shard records both runs as open"
    clock.now += LEASE - 1
    assert restarted.lapse_due() == [], "a taken run gets a full lease from the taking"
    clock.now += 1
    assert sorted(restarted.lapse_due(), key=lambda lapse: lapse.run_id) == [
        Lapse("r-lost", closed=True), Lapse("r-other", closed=True)]
    ex = restarted.execution("r-lost")
    assert ex.state is State.FAILED and ex.lapsed == RUNTIME_LOST
    assert ex.transitions[-1].reason == RUNTIME_LOST
    assert announced(restarted, "r-lost")[-3:] == [("run.lease_lapsed", None), ("run.transitioned", "failed"),
                                                  ("run.closed", "failed")]

    again = leased(open_journal(), clock)
    assert again.take_shards([0]) == 0, "the closings released the runs from the shard"


@pytest.mark.rule("X10")
def test_two_instances_that_both_hold_a_shard_close_its_run_once(open_journal) -> None:
    """A rebalance can leave two instances holding a shard for a moment: the closing is one unit
    of work under optimistic concurrency, so the one that loses finds the run closed."""
    clock = Clock()
    a, b = leased(open_journal(), clock), leased(open_journal(), clock)
    Feeder(a).send(*to_running("r1"), partition=0)
    # b consumed the partition once too (its cache holds the running execution)
    b.process([Inbound(str(Topic.RUNTIME), 0, 50, RunHeartbeat(run_id="r1"))])
    assert b.take_shards([0]) == 1

    clock.now += LEASE
    barrier = threading.Barrier(2)
    results: dict[str, list[Lapse]] = {}

    def sweep(name: str, journal: RuntimeJournal) -> None:
        barrier.wait()
        results[name] = journal.lapse_due()

    threads = [threading.Thread(target=sweep, args=(name, j)) for name, j in (("a", a), ("b", b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    closings = [lapse for lapses in results.values() for lapse in lapses if lapse.closed]
    assert closings == [Lapse("r1", closed=True)], results
    assert a.execution("r1").state is State.FAILED
    assert [kind for kind, _ in announced(a, "r1")].count("run.closed") == 1
    assert "r1" not in a.leases and "r1" not in b.leases


def damage_latest_event(settings: Settings, journal: RuntimeJournal, run_id: str) -> None:
    """Overwrite the state of the execution's latest stored event, as disk corruption or a
    stray manual edit would: the execution no longer reads back."""
    execution_id = ids.execution_id(run_id)
    tables = backend_for(settings).tables("journal")
    try:
        with journal.recorder.datastore.transaction(commit=True) as cursor:  # type: ignore[attr-defined]
            events, q = tables.table(journal.recorder.events_table_name), tables.q  # type: ignore[attr-defined]
            stored_id = execution_id if settings.database_url else execution_id.hex
            cursor.execute(q(f"SELECT max(originator_version) AS v FROM {events} WHERE originator_id = ?"),
                           (stored_id,))
            version = cursor.fetchone()["v"]
            cursor.execute(q(f"UPDATE {events} SET state = ? WHERE originator_id = ? AND originator_version = ?"),
                           (b"{damaged", stored_id, version))
    finally:
        tables.close()


@pytest.mark.rule("X10")
def test_a_wave_of_lapses_closes_every_run_and_one_that_cannot_be_closed_keeps_no_other_open(
        open_journal, journal_settings: Settings) -> None:
    """Runtimes that went away together leave their runs to lapse in one sweep, several units
    of work of them; a run whose lapse cannot be recorded fails alone and is tried again by
    the next sweep."""
    clock = Clock()
    first = leased(open_journal(), clock)
    runs = [f"r-{n:03d}" for n in range(LAPSES_PER_UNIT + 30)]
    feed = Feeder(first)
    for n, run_id in enumerate(runs):
        feed.send(*to_running(run_id, message_id=f"m-{n}", conversation_id=f"conv-{n}"), partition=0)
    broken = runs[LAPSES_PER_UNIT + 5]  # in the sweep's second unit
    damage_latest_event(journal_settings, first, broken)
    first.close()

    restarted = leased(open_journal(), clock)
    assert restarted.take_shards([0]) == len(runs)
    clock.now += LEASE
    lapsed = restarted.lapse_due()
    assert sorted(lapse.run_id for lapse in lapsed) == [r for r in runs if r != broken]
    assert all(lapse.closed for lapse in lapsed)
    assert all(restarted.execution(r).lapsed == RUNTIME_LOST for r in runs if r != broken)
    assert broken in restarted.leases, "still due: the next sweep tries it again"
    assert restarted.lapse_due() == [] and broken in restarted.leases, "it fails again, alone"
    assert leased(open_journal(), clock).take_shards([0]) == 1, "the shard holds the broken run alone"


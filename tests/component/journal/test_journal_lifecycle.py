"""X2 — closed lifecycle: one transition table, typed refusals recorded as facts, redelivery is a no-op."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from journal_helpers import admitted, completed, to_running

from imprint.contracts.runtime import RunFailed, RunQueued, RunRejected, RunStage, RunStarted, RunStopped, RunThrottled, ToolReceipt
from imprint.journal.handling import APPLIED_TYPES
from imprint.journal.lifecycle import MESSAGE_TARGETS, OUTCOMES, TERMINAL, TRANSITIONS, State, check_transition
from imprint.journal.refusals import Refusal, RefusalCode

ALL = [None, *State]


@pytest.mark.rule("X2")
@pytest.mark.parametrize(("current", "target"), list(itertools.product(ALL, list(State))))
def test_every_pair_is_either_a_table_edge_or_a_typed_refusal(current: State | None, target: State) -> None:
    outcome = "answered" if target is State.COMPLETED else None
    if target in TRANSITIONS[current]:
        check_transition(current, target, outcome)
    else:
        with pytest.raises(Refusal) as refused:
            check_transition(current, target, outcome)
        assert isinstance(refused.value.code, RefusalCode)
        if current is None:
            assert refused.value.code is RefusalCode.NOT_ADMITTED
        elif current in TERMINAL:
            assert refused.value.code in (RefusalCode.ALREADY_TERMINAL, RefusalCode.DUPLICATE_ADMISSION)


@pytest.mark.rule("X2")
def test_every_type_that_asks_for_a_state_has_a_handler() -> None:
    # The intake's table is keyed by message class, this one by type: neither may leave the other behind.
    assert set(MESSAGE_TARGETS) <= APPLIED_TYPES, sorted(set(MESSAGE_TARGETS) - APPLIED_TYPES)


@pytest.mark.rule("X2")
def test_documented_shortcuts_and_forbidden_skips() -> None:
    assert State.REJECTED in TRANSITIONS[State.ADMITTED]
    assert State.THROTTLED in TRANSITIONS[State.QUEUED]
    assert State.STOPPED in TRANSITIONS[State.QUEUED]
    assert State.RUNNING not in TRANSITIONS[State.ADMITTED]  # no skipping the queue
    assert State.COMPLETED not in TRANSITIONS[State.QUEUED]  # nothing completes without running
    assert State.REJECTED not in TRANSITIONS[State.QUEUED]  # rejection is the admission verdict
    assert all(not TRANSITIONS[t] for t in TERMINAL)


@pytest.mark.rule("X2")
@pytest.mark.parametrize("outcome", [None, "", "partial", "ANSWERED"])
def test_completion_needs_exactly_one_known_outcome(outcome: str | None) -> None:
    with pytest.raises(Refusal) as refused:
        check_transition(State.RUNNING, State.COMPLETED, outcome)
    assert refused.value.code is RefusalCode.OUTCOME_MISMATCH


@pytest.mark.rule("X2")
@pytest.mark.parametrize("target", sorted(TERMINAL - {State.COMPLETED}))
def test_only_completed_carries_an_outcome(target: State) -> None:
    with pytest.raises(Refusal) as refused:
        check_transition(State.RUNNING if target is not State.REJECTED else State.ADMITTED, target, "answered")
    assert refused.value.code is RefusalCode.OUTCOME_MISMATCH


@pytest.mark.rule("X2")
def test_happy_path_and_outcome(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1"))
    ex = journal.execution("r1")
    assert ex.state is State.COMPLETED and ex.outcome == "answered"
    assert [t.state for t in ex.transitions] == [State.ADMITTED, State.QUEUED, State.RUNNING, State.COMPLETED]
    assert [t.sequence for t in ex.transitions] == [1, 2, 3, 4]
    assert ex.refusals == []


@pytest.mark.rule("X2")
def test_completed_twice_with_two_outcomes_is_refused_and_recorded(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1", "answered"))
    frozen = journal.execution("r1").record
    feed(completed("r1", "insufficient_evidence", answer=None))
    ex = journal.execution("r1")
    assert ex.outcome == "answered" and ex.record == frozen
    assert [(r.message_type, r.code) for r in ex.refusals] == [("run.completed", "contradictory_completion")]


@pytest.mark.rule("X2")
def test_identical_second_completion_with_new_event_id_is_a_refused_duplicate(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1"))
    feed(completed("r1"))
    ex = journal.execution("r1")
    assert [r.code for r in ex.refusals] == ["duplicate_completion"]
    assert ex.sequence == 4


@pytest.mark.rule("X2")
def test_running_after_failed_is_refused_and_recorded(feed, journal) -> None:
    feed(*to_running("r1"), RunFailed(run_id="r1", reason="provider timeout"), RunStarted(run_id="r1"), completed("r1"))
    ex = journal.execution("r1")
    assert ex.state is State.FAILED and ex.outcome is None and ex.record is None
    assert [(r.message_type, r.code) for r in ex.refusals] == [("run.started", "already_terminal"), ("run.completed", "already_terminal")]


@pytest.mark.rule("X2")
@pytest.mark.parametrize(
    "message",
    [
        RunQueued(run_id="r9"),
        RunStarted(run_id="r9"),
        completed("r9"),
        RunStopped(run_id="r9"),
        RunStage(run_id="r9", stage="search"),
        ToolReceipt(run_id="r9", tool_call_id="call-1", status="ok"),
    ],
    ids=lambda m: m.type,
)
def test_anything_before_admission_is_refused_and_recorded(feed, journal, message) -> None:
    feed(message)
    ex = journal.execution("r9")
    assert ex is not None and ex.state is None and not ex.admitted
    assert [(r.message_type, r.code) for r in ex.refusals] == [(message.type, "not_admitted")]


@pytest.mark.rule("X2")
def test_refusals_are_stored_facts_that_change_nothing(feed, journal) -> None:
    feed(*to_running("r1"))
    before = journal.execution("r1").version
    feed(RunQueued(run_id="r1"))  # running → queued: illegal
    ex = journal.execution("r1")
    assert ex.state is State.RUNNING
    assert ex.version == before + 1  # exactly one appended fact: the refusal
    assert ex.refusals[-1].code == "illegal_transition"


@pytest.mark.rule("X2")
def test_exact_redelivery_is_a_noop_not_a_refusal(feed, journal) -> None:
    msgs = [*to_running("r1"), completed("r1")]
    feed(*msgs)
    version = journal.execution("r1").version
    feed(*msgs)  # same event_ids, new offsets: no tracking shortcut, the aggregate dedupes
    ex = journal.execution("r1")
    assert ex.version == version and ex.refusals == []


@pytest.mark.rule("X2")
@pytest.mark.parametrize(
    ("path", "final"),
    [
        ([RunRejected(run_id="r1", reason="quota")], State.REJECTED),
        ([RunThrottled(run_id="r1")], State.THROTTLED),
        ([RunQueued(run_id="r1"), RunThrottled(run_id="r1")], State.THROTTLED),
        ([RunQueued(run_id="r1"), RunStopped(run_id="r1")], State.STOPPED),
        ([RunQueued(run_id="r1"), RunStarted(run_id="r1"), RunStopped(run_id="r1")], State.STOPPED),
    ],
)
def test_legal_shortcuts(feed, journal, path, final) -> None:
    feed(admitted("r1"), *path)
    ex = journal.execution("r1")
    assert ex.state is final and ex.refusals == [] and ex.outcome is None


LIFECYCLE = st.sampled_from(["queued", "started", "completed", "stopped", "failed", "throttled", "rejected", "admitted"])


def _message(kind: str, n: int):
    run = "rh"
    return {
        "queued": lambda: RunQueued(run_id=run),
        "started": lambda: RunStarted(run_id=run),
        "completed": lambda: completed(run, outcome=["answered", "declined"][n % 2]),
        "stopped": lambda: RunStopped(run_id=run),
        "failed": lambda: RunFailed(run_id=run, reason="x"),
        "throttled": lambda: RunThrottled(run_id=run),
        "rejected": lambda: RunRejected(run_id=run),
        "admitted": lambda: admitted(run, qcs_set=None),
    }[kind]()


@pytest.mark.rule("X2")
@settings(max_examples=60, deadline=None)
@given(st.lists(LIFECYCLE, min_size=1, max_size=12))
def test_any_sequence_follows_the_table(kinds: list[str]) -> None:
    from journal_helpers import Feeder

    from imprint.shredding import InMemoryKeyring
    from services.journal.application import RuntimeJournal
    from tests.support.backends import memory_environment

    journal = RuntimeJournal(memory_environment("journal"), keyring=InMemoryKeyring())
    feed = Feeder(journal)
    messages = [_message(k, i) for i, k in enumerate(kinds)]
    feed(*messages)
    ex = journal.execution("rh")
    accepted = [t.state for t in ex.transitions]
    prev: State | None = None
    for state in accepted:
        assert state in TRANSITIONS[prev]
        prev = state
    assert sum(1 for s in accepted if s in TERMINAL) <= 1
    assert len(accepted) + len(ex.refusals) == len(messages)
    assert (ex.outcome is not None) == (ex.state is State.COMPLETED)
    if ex.outcome is not None:
        assert ex.outcome in OUTCOMES
    journal.close()

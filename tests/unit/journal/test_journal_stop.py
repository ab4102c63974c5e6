"""X11 — the Journal records a user's stop request as a fact of the open run, and the
``stopped`` transition that follows says the user asked for it (pure: the handler table over
an in-memory workspace and keyring)."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.runtime import RunCompleted, RunFailed, RunStopped
from imprint.journal import ids
from imprint.journal.announcements import announce
from imprint.journal.conversation import QueueEvent
from imprint.journal.execution import AnswerExecution
from imprint.journal.handling import APPLIED_TYPES, Context, handle
from imprint.journal.keys import JournalKeys
from imprint.journal.leases import LeaseShard
from imprint.journal.lifecycle import STOP_REQUESTED, State
from imprint.journal.refusals import RefusalCode
from imprint.shredding import InMemoryKeyring
from imprint.workspace import MemoryWorkspace
from tests.support.runs import admitted, opened

ACCOUNT = "acct-1"


def handled(ws: MemoryWorkspace, handling: Context, *messages: Any) -> list[Any]:
    for message in messages:
        handle(ws, message, handling)
    # The lease record's events (X10: tests/component/journal/test_journal_leases.py) and the
    # conversation queue's (X12: test_conversation_policy.py) are left out.
    return [e for e in ws.pending() if not isinstance(e, (LeaseShard.Event, QueueEvent))]


def running(ws: MemoryWorkspace, handling: Context, run_id: str) -> None:
    handled(ws, handling, *opened(admitted(run_id, account_id=ACCOUNT, question="Why?")))


def execution(ws: MemoryWorkspace, run_id: str) -> AnswerExecution:
    found = ws.get(AnswerExecution, ids.execution_id(run_id))
    assert found is not None
    return found


def cancel(run_id: str, account_id: str = ACCOUNT) -> RunCancelRequested:
    return RunCancelRequested(run_id=run_id, account_id=account_id)


@pytest.fixture
def handling() -> Context:
    return Context(JournalKeys(InMemoryKeyring()))


@pytest.mark.rule("X11")
def test_a_stop_request_for_an_open_run_is_recorded_on_its_execution_and_changes_no_state(
        handling: Context) -> None:
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    request = cancel("r1")
    recorded = handled(ws, handling, request)
    assert [type(e).__name__ for e in recorded] == ["StopRequested"]
    assert (recorded[0].event_id, recorded[0].account_id) == (str(request.event_id), ACCOUNT)
    ex = execution(ws, "r1")
    assert ex.stop_requested_at is not None and ex.state is State.RUNNING, "a request, not a transition"
    assert announce(recorded[0], InMemoryKeyring()) is None, "nothing to announce: the runtime hears the request itself"
    assert "run.cancel_requested" in APPLIED_TYPES, "the journal's consumer decodes the request"


@pytest.mark.rule("X11")
def test_the_request_is_recorded_once_a_redelivery_or_a_second_click_adds_nothing(handling: Context) -> None:
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    first = cancel("r1")
    assert len(handled(ws, handling, first)) == 1
    assert handled(ws, handling, first) == [], "an exact redelivery"
    assert handled(ws, handling, cancel("r1")) == [], "a second request while the first is pending"


@pytest.mark.rule("X11")
@pytest.mark.rule("X2")
@pytest.mark.parametrize("end", [RunCompleted(run_id="r1", outcome="answered"), RunStopped(run_id="r1"),
                                 RunFailed(run_id="r1", reason="provider down")], ids=lambda m: m.type)
def test_a_request_for_a_finished_run_changes_nothing(handling: Context, end: Any) -> None:
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    handled(ws, handling, end)
    before = execution(ws, "r1").state
    assert handled(ws, handling, cancel("r1")) == [], "no event at all: neither a request nor a refusal"
    ex = execution(ws, "r1")
    assert ex.state is before and ex.stop_requested_at is None and ex.refusals == []


@pytest.mark.rule("X11")
@pytest.mark.rule("D6")
def test_a_request_of_another_account_or_for_a_run_never_admitted_is_refused_and_recorded(
        handling: Context) -> None:
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    handled(ws, handling, cancel("r1", account_id="acct-other"), cancel("r-unknown"))
    assert execution(ws, "r1").stop_requested_at is None
    assert [(r.message_type, r.code) for r in execution(ws, "r1").refusals] == [
        ("run.cancel_requested", RefusalCode.ACCOUNT_MISMATCH.value)]
    assert [(r.message_type, r.code) for r in execution(ws, "r-unknown").refusals] == [
        ("run.cancel_requested", RefusalCode.NOT_ADMITTED.value)]


@pytest.mark.rule("X11")
@pytest.mark.rule("X2")
def test_the_stop_that_follows_a_request_says_the_user_asked_for_it_and_is_announced_so(
        handling: Context) -> None:
    keyring = InMemoryKeyring()
    handling = Context(JournalKeys(keyring))
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    running(ws, handling, "r2")
    handled(ws, handling, cancel("r1"))
    stopped = handled(ws, handling, RunStopped(run_id="r1"), RunStopped(run_id="r2"))
    transitions = {e.run_id: e for e in stopped if type(e).__name__ == "Transitioned"}
    assert transitions["r1"].reason == STOP_REQUESTED
    assert transitions["r2"].reason is None, "a runtime that stopped on its own gave no reason"
    announced = announce(transitions["r1"], keyring)
    assert announced is not None and (announced.state, announced.reason) == ("stopped", STOP_REQUESTED)
    assert execution(ws, "r1").state is State.STOPPED


@pytest.mark.rule("X11")
def test_a_stop_read_before_the_request_it_answers_records_that_request_once(handling: Context) -> None:
    """The request (control topic) and the runtime's stop (runtime topic) may be read in
    either order; the fact recorded is the same, once."""
    ws = MemoryWorkspace()
    running(ws, handling, "r1")
    request = cancel("r1")
    recorded = handled(ws, handling, RunStopped(run_id="r1", cancel_request_id=request.event_id))
    assert [type(e).__name__ for e in recorded] == ["StopRequested", "Transitioned", "Closed"]
    assert recorded[0].event_id == str(request.event_id), "recorded under the request's own id"
    assert recorded[1].reason == STOP_REQUESTED
    assert handled(ws, handling, request) == [], "the request itself, read later, is that same fact"
    ex = execution(ws, "r1")
    assert ex.stop_requested_at is not None and ex.state is State.STOPPED and ex.refusals == []

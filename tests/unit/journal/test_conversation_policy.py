"""X12 — a conversation's policy for a question that arrives while another is running or queued
(pure: the Journal's handler table over an in-memory workspace and keyring, and the decisions of
:mod:`imprint.journal.queue`)."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.contracts import conversation as facts
from imprint.contracts.control import RunCancelRequested
from imprint.contracts.runtime import QuestionConditionSet, RunAdmitted, RunCompleted, RunQueued, RunStarted, RunStopped
from imprint.journal import ids
from imprint.journal.announcements import announce
from imprint.journal.conversation import Conversation
from imprint.journal.execution import AnswerExecution
from imprint.journal.handling import Context, handle
from imprint.journal.keys import JournalKeys
from imprint.journal.queue import Enqueue, Interrupt, Merge, Queue, Refuse, Start, Steer, decide
from imprint.journal.refusals import RefusalCode
from imprint.shredding import InMemoryKeyring
from imprint.workspace import MemoryWorkspace

pytestmark = pytest.mark.rule("X12")

ACCOUNT = "acct-1"
CONV = "conv-q"


class Journal:
    """The handler table over one workspace; what it recorded, announced as the relay would."""

    def __init__(self, policy: str = "enqueue") -> None:
        self.keyring = InMemoryKeyring()
        self.context = Context(JournalKeys(self.keyring), policy=policy)
        self.ws = MemoryWorkspace()

    def feed(self, *messages: Any) -> list[Any]:
        """Handle ``messages``; the announcements of what they recorded, in order."""
        for message in messages:
            handle(self.ws, message, self.context)
        events = self.ws.pending()  # collected once: what these messages recorded
        return [a for a in (announce(e, self.keyring) for e in events) if a is not None]

    def admit(self, run_id: str, policy: str | None = None, question: str = "Why?") -> list[Any]:
        return self.feed(RunAdmitted(run_id=run_id, account_id=ACCOUNT, conversation_id=CONV,
                                     message_id=f"msg-{run_id}", question=question,
                                     qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"), policy=policy),
                         RunQueued(run_id=run_id))

    def start(self, run_id: str) -> list[Any]:
        return self.feed(RunStarted(run_id=run_id))

    def execution(self, run_id: str) -> AnswerExecution:
        found = self.ws.get(AnswerExecution, ids.execution_id(run_id))
        assert found is not None
        return found

    def conversation(self) -> Conversation:
        found = self.ws.get(Conversation, ids.conversation_id(CONV))
        assert found is not None
        return found


def of(kind: type, announced: list[Any]) -> list[Any]:
    return [a for a in announced if isinstance(a, kind)]


def test_the_decision_of_each_policy() -> None:
    idle, busy = Queue(), Queue(running=("r1",), queued=("r2",))
    assert {p: decide(idle, "r9", p) for p in facts.POLICIES} == {p: Start("r9") for p in facts.POLICIES}
    assert decide(busy, "r9", "concurrent") == Start("r9")
    assert decide(busy, "r9", "reject") == Refuse("r9", ("r1", "r2"))
    assert decide(busy, "r9", "enqueue") == Enqueue("r9")
    assert decide(busy, "r9", "interrupt") == Interrupt("r9", ("r1",))
    assert decide(busy, "r9", "merge") == Merge("r9", "r2")
    assert decide(Queue(running=("r1",)), "r9", "merge") == Enqueue("r9"), "nothing queued to fold into"
    assert decide(busy, "r9", "steer") == Steer("r9", "r1")


def test_enqueue_waits_for_every_question_before_it_and_a_start_out_of_turn_is_refused() -> None:
    j = Journal()
    started = of(facts.QuestionStarted, j.admit("r1"))
    assert [(f.run_id, f.sequence, f.running) for f in started] == [("r1", 1, ["r1"])]
    j.start("r1")
    queued = of(facts.QuestionQueued, j.admit("r2"))
    assert [(f.run_id, f.policy, f.running, f.queued) for f in queued] == [("r2", "enqueue", ["r1"], ["r2"])], \
        "no policy named: the deployment's default"
    assert of(facts.QuestionQueued, j.admit("r3"))[0].queued == ["r2", "r3"]

    j.start("r2")
    assert j.execution("r2").refusals[-1].code == RefusalCode.NOT_ITS_TURN
    assert j.execution("r2").state.value == "queued"

    announced = j.feed(RunCompleted(run_id="r1", outcome="answered", answer_text="A1"))
    ended, started = of(facts.QuestionEnded, announced), of(facts.QuestionStarted, announced)
    assert [(f.run_id, f.end, f.state) for f in ended] == [("r1", "answered", "completed")]
    assert [(f.run_id, f.running, f.queued) for f in started] == [("r2", ["r2"], ["r3"])], "one at a time"
    assert [f.sequence for f in ended + started] == [4, 5], "the conversation's facts are numbered in order"
    j.feed(RunStarted(run_id="r2", event_id=RunStarted(run_id="x").event_id))  # the runtime's start, now in turn
    assert j.execution("r2").state.value == "running"


def test_reject_refuses_with_its_reason_and_closes_the_run() -> None:
    j = Journal(policy="reject")
    j.admit("r1")
    j.start("r1")
    announced = j.admit("r2")
    refused = of(facts.QuestionRefused, announced)
    assert [(f.run_id, f.reason, f.detail) for f in refused] == [("r2", "conversation_busy", "busy with r1")]
    assert [(f.run_id, f.end) for f in of(facts.QuestionEnded, announced)] == [("r2", "refused")]
    r2 = j.execution("r2")
    assert (r2.state.value, r2.transitions[-1].reason) == ("rejected", "conversation_busy")
    assert r2.closed_at is not None, "the Journal closed it: Delivery's stream of r2 ends"
    assert r2.refusals[-1].message_type == "run.queued", "the runtime's late run.queued is recorded, refused"
    assert [(m.run_id, m.state, m.end) for m in of(facts.RunEndedByPolicy, announced)] == [
        ("r2", "rejected", "refused")], "Publication hears it: the run's streams end"


def test_interrupt_stops_the_running_question_through_x11_as_caused_by_the_newer_one() -> None:
    j = Journal()
    j.admit("r1")
    j.start("r1")
    announced = j.admit("r2", policy="interrupt")
    stop = of(RunCancelRequested, announced)
    assert [(s.run_id, s.interrupted_by, str(s.event_id)) for s in stop] == [
        ("r1", "r2", ids.interruption_id("r1", "r2"))]
    assert [(f.run_id, f.by_run_id) for f in of(facts.RunInterrupted, announced)] == [("r1", "r2")]
    assert of(facts.QuestionQueued, announced)[0].queued == ["r2"]

    assert j.feed(stop[0]) == [], "the Journal hears its own request back: the same fact, once"
    announced = j.feed(RunStopped(run_id="r1", cancel_request_id=stop[0].event_id))
    assert (j.execution("r1").state.value, j.execution("r1").transitions[-1].reason) == ("stopped", "interrupted")
    assert [(f.run_id, f.end) for f in of(facts.QuestionEnded, announced)] == [("r1", "interrupted")]
    assert [f.run_id for f in of(facts.QuestionStarted, announced)] == ["r2"]


def test_merge_folds_into_the_queued_question_and_each_message_keeps_its_run() -> None:
    j = Journal()
    j.admit("r1")
    j.start("r1")
    j.admit("r2")
    announced = j.admit("r3", policy="merge", question="And in July?")
    merged = of(facts.QuestionMerged, announced)
    assert [(f.run_id, f.message_id, f.into_run_id, f.question) for f in merged] == [
        ("r3", "msg-r3", "r2", "And in July?")]
    assert (j.execution("r3").state.value, j.execution("r3").transitions[-1].reason) == ("stopped", "merged")
    assert j.execution("r3").message_id == "msg-r3", "X1: the merged message stays bound to its own run"
    started = of(facts.QuestionStarted, j.feed(RunCompleted(run_id="r1", outcome="answered", answer_text="A")))
    assert [(f.run_id, f.merged) for f in started] == [("r2", ["r3"])], "r2's run answers both"


def test_steer_hands_the_question_to_the_running_run_through_the_control_topic() -> None:
    j = Journal()
    j.admit("r1")
    j.start("r1")
    announced = j.admit("r2", policy="steer", question="Only Europe, please.")
    steered = of(facts.RunSteered, announced)
    assert [(s.run_id, s.steered_run_id, s.message_id, s.question) for s in steered] == [
        ("r1", "r2", "msg-r2", "Only Europe, please.")]
    assert [(f.run_id, f.into_run_id) for f in of(facts.QuestionSteered, announced)] == [("r2", "r1")]
    assert [(f.run_id, f.end) for f in of(facts.QuestionEnded, announced)] == [("r2", "steered")]
    assert j.execution("r1").steered == ["r2"] and j.execution("r1").state.value == "running"


def test_concurrent_starts_beside_the_running_question() -> None:
    j = Journal(policy="concurrent")
    j.admit("r1")
    j.start("r1")
    assert [f.running for f in of(facts.QuestionStarted, j.admit("r2"))] == [["r1", "r2"]]
    j.start("r2")
    assert j.execution("r2").state.value == "running"


def test_the_user_cancels_a_queued_question_or_sends_it_now_and_is_refused_once_it_started() -> None:
    j = Journal()
    j.admit("r1")
    j.start("r1")
    j.admit("r2")
    j.admit("r3")
    cancel = facts.QuestionCancelRequested(conversation_id=CONV, account_id=ACCOUNT, run_id="r2")
    announced = j.feed(cancel)
    assert [(f.run_id, f.request_id, f.queued) for f in of(facts.QuestionCancelled, announced)] == [
        ("r2", cancel.event_id, ["r3"])]
    assert [(f.run_id, f.end) for f in of(facts.QuestionEnded, announced)] == [("r2", "cancelled")]
    assert (j.execution("r2").state.value, j.execution("r2").transitions[-1].reason) == ("stopped", "cancelled")

    assert j.feed(facts.QuestionCancelRequested(conversation_id=CONV, account_id=ACCOUNT, run_id="r1")) == []
    assert j.feed(facts.QuestionSendNowRequested(conversation_id=CONV, account_id=ACCOUNT, run_id="r2")) == []
    assert j.feed(facts.QuestionCancelRequested(conversation_id=CONV, account_id="intruder", run_id="r3")) == []
    assert j.conversation().refusals == [("question.cancel_requested", "question_started"),
                                         ("question.send_now_requested", "question_ended"),
                                         ("question.cancel_requested", "account_mismatch")]

    j.admit("r4")
    now = facts.QuestionSendNowRequested(conversation_id=CONV, account_id=ACCOUNT, run_id="r4")
    announced = j.feed(now)
    assert [f.queued for f in of(facts.QuestionSentNow, announced)] == [["r4", "r3"]]
    assert [(s.run_id, s.interrupted_by) for s in of(RunCancelRequested, announced)] == [("r1", "r4")]


def test_every_admitted_question_ends_exactly_once() -> None:
    j = Journal()
    ends: list[Any] = []
    ends += of(facts.QuestionEnded, j.admit("r1"))
    j.start("r1")
    for run_id, policy in (("r2", "enqueue"), ("r3", "merge"), ("r4", "reject"), ("r5", "steer")):
        ends += of(facts.QuestionEnded, j.admit(run_id, policy=policy))
    for run_id in ("r1", "r2"):
        ends += of(facts.QuestionEnded, j.feed(RunCompleted(run_id=run_id, outcome="answered", answer_text="A")))
        if run_id == "r1":
            j.feed(RunStarted(run_id="r2", event_id=RunStarted(run_id="again").event_id))
    assert sorted((f.run_id, f.end) for f in ends) == [
        ("r1", "answered"), ("r2", "answered"), ("r3", "merged"), ("r4", "refused"), ("r5", "steered")]
    assert j.conversation().queue == Queue()


def test_the_conversation_timeline_shows_each_question_and_names_one_left_without_an_end() -> None:
    from imprint.recovery.conversation import ConversationFold

    j = Journal()
    events: list[Any] = []

    def feed(*messages: Any) -> None:
        for message in messages:
            handle(j.ws, message, j.context)
        events.extend(e for e in j.ws.pending() if isinstance(e, Conversation.Event))

    def admitted(run_id: str, policy: str | None = None) -> RunAdmitted:
        return RunAdmitted(run_id=run_id, account_id=ACCOUNT, conversation_id=CONV, message_id=f"msg-{run_id}",
                           question="Why?", qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"), policy=policy)

    feed(admitted("r1"), RunQueued(run_id="r1"), RunStarted(run_id="r1"), admitted("r2", "reject"),
         admitted("r3", "interrupt"))
    feed(RunStopped(run_id="r1", cancel_request_id=RunCancelRequested(run_id="r1", account_id=ACCOUNT).event_id))
    document = ConversationFold.of(CONV, events)
    assert [(q["run_id"], q["policy"], q["decision"], q["end"], q["interrupted_by"]) for q in document["questions"]] == [
        ("r1", "enqueue", "started", "interrupted", "r3"), ("r2", "reject", "refused", "refused", None),
        ("r3", "interrupt", "queued", None, None)]
    assert (document["running"], document["queued"], document["unaccounted"], document["unread"]) == (
        ["r3"], [], [], [])
    assert [f["sequence"] for f in document["facts"]] == list(range(1, len(document["facts"]) + 1))

    silent = [e for e in events if not (isinstance(e, Conversation.QuestionEnded) and e.run_id == "r2")]
    assert ConversationFold.of(CONV, silent)["unaccounted"] == ["r2"], "a question without an end is named"

"""X12 — the runtime SDK waits for its question's turn in the conversation (:class:`Turns`, fed the
Journal's facts as :class:`~imprint.runtime.kafka.KafkaTurns` feeds them), raises a typed error for
a question the Journal ended first, and hands a steered question to the running agent's scope."""

from __future__ import annotations

import asyncio

import pytest

from imprint.contracts import conversation as facts
from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from imprint.runtime import MemoryTransport, RunWriter, StopRequests
from imprint.runtime.stopping import RunScope
from imprint.runtime.turns import (
    MergedQuestion,
    NotStarted,
    RunCancelled,
    RunMerged,
    RunRefused,
    RunSteered,
    Turn,
    Turns,
)

pytestmark = pytest.mark.rule("X12")

WAIT = 30.0
NAMED = dict(conversation_id="c", account_id="a")


def fact(kind: type, run_id: str, sequence: int, **fields: object) -> object:
    return kind(run_id=run_id, message_id=f"m-{run_id}", sequence=sequence, **NAMED, **fields)


def sent(transport: MemoryTransport) -> list[str]:
    return [decode(Topic.RUNTIME, record.value).type for record in transport.records]


async def test_start_sends_queued_waits_for_the_turn_then_sends_started() -> None:
    transport, turns = MemoryTransport(), Turns()
    writer = RunWriter(transport, "r2")
    await writer.admit(account_id="a", conversation_id="c", message_id="m-r2", question="Next?", policy="enqueue")
    starting = asyncio.create_task(writer.start(turns=turns, timeout=WAIT))
    turns.observe(fact(facts.QuestionQueued, "r2", 2, policy="enqueue", running=["r1"], queued=["r2"]))
    await asyncio.sleep(0)
    assert not starting.done() and sent(transport) == ["run.admitted", "run.queued"], "it waits for its turn"
    turns.observe(fact(facts.QuestionMerged, "r3", 3, into_run_id="r2", question="And July?"))
    turns.observe(fact(facts.QuestionStarted, "r2", 5, policy="enqueue", merged=["r3"], running=["r2"]))
    await asyncio.wait_for(starting, WAIT)
    assert sent(transport) == ["run.admitted", "run.queued", "run.started"]
    assert writer.turn == Turn("r2", (MergedQuestion("r3", "m-r3", "And July?"),)), "it answers the merged one too"
    assert decode(Topic.RUNTIME, transport.records[0].value).policy == "enqueue"


async def test_a_refused_question_raises_its_typed_error_and_never_starts() -> None:
    transport, turns = MemoryTransport(), Turns()
    writer = RunWriter(transport, "r2")
    turns.observe(fact(facts.QuestionRefused, "r2", 2, policy="reject", detail="busy with r1", running=["r1"]))
    turns.observe(fact(facts.QuestionEnded, "r2", 3, end="refused", state="rejected", reason="conversation_busy"))
    with pytest.raises(RunRefused) as refused:
        await writer.start(turns=turns, timeout=WAIT)
    assert (refused.value.reason, refused.value.detail) == ("conversation_busy", "conversation_busy: busy with r1")
    assert "run.started" not in sent(transport)


@pytest.mark.parametrize(("end", "error"), [("merged", RunMerged), ("cancelled", RunCancelled),
                                            ("steered", RunSteered)])
async def test_a_question_the_journal_ended_before_its_turn_raises_why(end: str, error: type) -> None:
    turns = Turns()
    waiting = asyncio.create_task(turns.wait("r3", WAIT))
    await asyncio.sleep(0)
    if end == "merged":
        turns.observe(fact(facts.QuestionMerged, "r3", 3, into_run_id="r2"))
    turns.observe(fact(facts.QuestionEnded, "r3", 4, end=end, state="stopped", reason=end))
    with pytest.raises(error) as raised:
        await waiting
    assert raised.value.end == end
    if end == "merged":
        assert raised.value.into_run_id == "r2"
    turns.observe(fact(facts.QuestionStarted, "r3", 9, policy="enqueue"))
    assert isinstance(turns.verdict("r3"), error), "the first verdict is final"


async def test_a_wait_that_hears_nothing_times_out() -> None:
    with pytest.raises(TimeoutError):
        await Turns().wait("r-silent", 0.05)


def test_a_steered_question_is_taken_by_its_runs_scope_once() -> None:
    stops = StopRequests()
    scope = RunScope(RunWriter(MemoryTransport(), "r1"), stops)
    steer = facts.RunSteered(run_id="r1", steered_run_id="r2", message_id="m-r2", question="Only Europe.", **NAMED)
    stops.observe(steer)
    stops.observe(facts.RunSteered(run_id="r9", steered_run_id="r8", message_id="m-r8", **NAMED))
    stops.observe(steer)  # a redelivery
    assert [s.question for s in scope.take_steered()] == ["Only Europe."]
    assert scope.take_steered() == [] and not scope.requested, "a steer is no stop"


async def test_a_question_waiting_in_a_deleted_conversation_never_starts() -> None:
    from imprint.contracts.runs import ConversationDeleted

    turns = Turns()
    waiting = asyncio.create_task(turns.wait("r2", WAIT))
    await asyncio.sleep(0)
    turns.observe(ConversationDeleted(run_id="r2", **NAMED))
    with pytest.raises(NotStarted) as deleted:
        await waiting
    assert deleted.value.end == "deleted"


@pytest.mark.rule("X10")
async def test_a_question_waiting_for_its_turn_keeps_its_runs_lease_with_heartbeats() -> None:
    transport, turns = MemoryTransport(), Turns()
    writer = RunWriter(transport, "r2")
    starting = asyncio.create_task(writer.start(turns=turns, timeout=WAIT, heartbeat_seconds=0.05))
    deadline = asyncio.get_running_loop().time() + WAIT
    while sent(transport).count("run.heartbeat") < 2:
        assert asyncio.get_running_loop().time() < deadline and not starting.done()
        await asyncio.sleep(0.01)
    turns.observe(fact(facts.QuestionStarted, "r2", 3, policy="enqueue", running=["r2"]))
    await asyncio.wait_for(starting, WAIT)
    assert sent(transport)[0] == "run.queued" and sent(transport)[-1] == "run.started"

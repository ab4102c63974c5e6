"""X12 over real Kafka, on each store backend: the Journal as a real process, the runtime SDK as a
runtime uses it (``KafkaTransport``, ``KafkaTurns``, ``KafkaControl``). One conversation per policy,
all against one Journal: ``enqueue`` waits for its turn, ``reject`` raises its typed error,
``interrupt`` stops the running run through X11 and follows it, ``merge`` folds a question into the
queued one, ``steer`` hands it to the running run's scope, the user's cancel ends a queued question
and is refused once it started, their send-now interrupts the running one and jumps the queue; Publication ends each run the Journal closed (``answer.settled``);
``imprint inspect --conversation`` shows each timeline."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable

import pytest

from imprint.contracts.conversation import QuestionCancelRequested, QuestionSendNowRequested
from imprint.contracts.topics import Topic
from imprint.runtime import RunWriter, run_scope
from imprint.runtime.kafka import KafkaControl, KafkaTransport, KafkaTurns
from imprint.runtime.turns import RunCancelled, RunMerged, RunRefused, RunSteered
from services.common.settings import Settings
from services.journal.application import open_journal
from services.recovery.cli import inspect_conversation
from tests.support.kafka import produce, read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.rule("X12"), pytest.mark.timeout(120)]

ACCOUNT = "acct-queue"
WAIT = 45.0


async def until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Wait for ``condition`` (checked between short sleeps), failing after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


async def forever() -> None:
    await asyncio.Event().wait()  # a model still producing: only a stop ends it


class Runtime:
    def __init__(self, settings: Settings, kafka: KafkaTransport, turns: KafkaTurns, control: KafkaControl) -> None:
        self.settings, self.kafka, self.turns, self.control = settings, kafka, turns, control

    async def ask(self, conversation: str, run_id: str, question: str, policy: str | None = None) -> RunWriter:
        writer = RunWriter(self.kafka, run_id)
        await writer.admit(account_id=ACCOUNT, conversation_id=conversation, message_id=f"msg-{run_id}",
                           question=question, policy=policy)  # type: ignore[arg-type]
        return writer

    def start(self, writer: RunWriter) -> asyncio.Task[object]:
        return asyncio.create_task(writer.start(turns=self.turns, timeout=WAIT))


async def scenarios(settings: Settings) -> dict[str, object]:
    seen: dict[str, object] = {}
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as kafka, \
            KafkaTurns(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as turns, \
            KafkaControl(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as control:
        rt = Runtime(settings, kafka, turns, control)
        await asyncio.gather(enqueue(rt, seen), reject(rt, seen), interrupt(rt, seen), merge(rt, seen),
                             steer(rt, seen), cancel(settings, rt, seen), send_now(settings, rt, seen))
    return seen


async def enqueue(rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-enqueue", "e1", "What is the tallest mountain?")  # the deployment's default
    await rt.start(first)
    second = await rt.ask("c-enqueue", "e2", "And the second tallest?")
    waiting = rt.start(second)
    await queued(rt, "e2")
    seen["enqueue_waited"] = not waiting.done()
    await first.complete("answered", answer_text="Everest.")
    await asyncio.wait_for(waiting, WAIT)
    await second.complete("answered", answer_text="K2.")


async def queued(rt: Runtime, run_id: str) -> None:
    """Until the Journal published that ``run_id`` waits in its conversation's queue."""
    await read_topic(rt.settings, Topic.RUNS, timeout=WAIT, until=lambda vs: any(
        v["type"] == "conversation.question_queued" and v["run_id"] == run_id for v in vs))


async def reject(rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-reject", "j1", "Summarise the report.")
    await rt.start(first)
    second = await rt.ask("c-reject", "j2", "Also the appendix.", policy="reject")
    with pytest.raises(RunRefused) as refused:
        await rt.start(second)
    seen["reject"] = (refused.value.reason, refused.value.detail)
    await first.complete("answered", answer_text="Summary.")


async def interrupt(rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-interrupt", "i1", "Write a long essay.")
    await rt.start(first)

    async def answering() -> bool:
        async with run_scope(first, rt.control) as scope:
            await forever()
        return scope.stopped

    stopped = asyncio.create_task(answering())
    second = await rt.ask("c-interrupt", "i2", "Stop, answer this instead.", policy="interrupt")
    await rt.start(second)  # its turn comes once the interrupted run ended
    seen["interrupted_first_stopped"] = await asyncio.wait_for(stopped, WAIT)
    await second.complete("answered", answer_text="Instead.")


async def merge(rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-merge", "m1", "Weather in Oslo?")
    await rt.start(first)
    second = await rt.ask("c-merge", "m2", "In Bergen?")
    queued = rt.start(second)
    third = await rt.ask("c-merge", "m3", "And in Tromsø?", policy="merge")
    with pytest.raises(RunMerged) as merged:
        await rt.start(third)
    seen["merged_into"] = merged.value.into_run_id
    await first.complete("answered", answer_text="Rain.")
    await asyncio.wait_for(queued, WAIT)
    seen["merged"] = [(m.run_id, m.message_id, m.question) for m in (second.turn.merged if second.turn else ())]
    await second.complete("answered", answer_text="Rain in both.")


async def steer(rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-steer", "s1", "List European capitals.")
    await rt.start(first)
    async with run_scope(first, rt.control) as scope:
        second = await rt.ask("c-steer", "s2", "Only the Nordic ones.", policy="steer")
        with pytest.raises(RunSteered) as steered:
            await rt.start(second)
        taken: list[object] = []
        await until(lambda: bool(taken.extend(scope.take_steered()) or taken), "the steer reached the scope")
    seen["steered"] = (steered.value.into_run_id, [(s.steered_run_id, s.question) for s in taken])  # type: ignore[attr-defined]
    await first.complete("answered", answer_text="Oslo, Stockholm, Copenhagen, Helsinki, Reykjavík.")


async def cancel(settings: Settings, rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-cancel", "x1", "Translate the contract.")
    await rt.start(first)
    second = await rt.ask("c-cancel", "x2", "And the annex.")
    waiting = rt.start(second)
    await queued(rt, "x2")
    # What Delivery's HTTP API puts on the control topic. Both are keyed by the conversation:
    # the Journal takes x1's before x2's, so x2's cancellation (awaited below) is announced
    # only once x1's request was refused while x1 still runs (it completes after).
    await produce(settings, Topic.CONTROL,
                  QuestionCancelRequested(conversation_id="c-cancel", account_id=ACCOUNT, run_id="x1"),
                  QuestionCancelRequested(conversation_id="c-cancel", account_id=ACCOUNT, run_id="x2"))
    with pytest.raises(RunCancelled):
        await waiting
    await first.complete("answered", answer_text="Translated.")
    seen["cancelled"] = True


async def send_now(settings: Settings, rt: Runtime, seen: dict[str, object]) -> None:
    first = await rt.ask("c-now", "n1", "Draft the letter.")
    await rt.start(first)

    async def answering() -> bool:
        async with run_scope(first, rt.control) as scope:
            await forever()
        return scope.stopped

    stopped = asyncio.create_task(answering())
    second = await rt.ask("c-now", "n2", "Then a summary.")
    later = rt.start(second)
    await queued(rt, "n2")
    third = await rt.ask("c-now", "n3", "Urgent: the date first.")
    now = rt.start(third)
    await queued(rt, "n3")
    await produce(settings, Topic.CONTROL,  # the user's "send now" on the newest question
                  QuestionSendNowRequested(conversation_id="c-now", account_id=ACCOUNT, run_id="n3"))
    seen["sent_now_stopped_the_first"] = await asyncio.wait_for(stopped, WAIT)
    await asyncio.wait_for(now, WAIT)
    seen["sent_now_before_the_earlier"] = not later.done()
    await third.complete("answered", answer_text="The 3rd.")
    await asyncio.wait_for(later, WAIT)
    await second.complete("answered", answer_text="Summary.")


def timeline(settings: Settings, conversation: str) -> dict[str, object]:
    out = io.StringIO()
    assert inspect_conversation(settings, conversation, out=out, output="json") == 0
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def ends(document: dict[str, object]) -> list[tuple[str, str | None, str | None]]:
    return [(q["run_id"], q["policy"], q["end"]) for q in document["questions"]]  # type: ignore[index, union-attr]


def test_each_policy_over_kafka_and_every_question_ends_visibly(isolated: Settings) -> None:
    with Stack(isolated, parts=("journal", "publication")) as stack:
        seen = asyncio.run(asyncio.wait_for(scenarios(isolated), 100))
        asyncio.run(read_topic(isolated, Topic.RUNS, timeout=WAIT, until=lambda vs: {
            v["run_id"] for v in vs if v["type"] == "conversation.question_ended"} >= {
            "e1", "e2", "j1", "j2", "i1", "i2", "m1", "m2", "m3", "s1", "s2", "x1", "x2", "n1", "n2", "n3"}))
        settled = asyncio.run(read_topic(isolated, Topic.PUBLICATION, timeout=WAIT, until=lambda vs: {
            v["run_id"] for v in vs if v["type"] == "answer.settled"} >= {"j2", "m3", "s2", "x2"}))
        assert "Traceback" not in stack.log("journal")
    assert {v["run_id"]: v["state"] for v in settled if v["run_id"] in ("j2", "m3", "s2", "x2")} == {
        "j2": "rejected", "m3": "stopped", "s2": "stopped", "x2": "stopped"}, \
        "Publication ends the runs the Journal closed: Delivery's streams of them end"

    assert seen["enqueue_waited"] is True
    assert seen["reject"] == ("conversation_busy", "conversation_busy: busy with j1")
    assert seen["interrupted_first_stopped"] is True
    assert seen["merged_into"] == "m2" and seen["merged"] == [("m3", "msg-m3", "And in Tromsø?")]
    assert seen["steered"] == ("s1", [("s2", "Only the Nordic ones.")])
    assert seen["cancelled"] is True
    assert seen["sent_now_stopped_the_first"] is True and seen["sent_now_before_the_earlier"] is True

    assert ends(timeline(isolated, "c-enqueue")) == [("e1", "enqueue", "answered"), ("e2", "enqueue", "answered")]
    assert ends(timeline(isolated, "c-reject")) == [("j1", "enqueue", "answered"), ("j2", "reject", "refused")]
    interrupted = timeline(isolated, "c-interrupt")
    assert ends(interrupted) == [("i1", "enqueue", "interrupted"), ("i2", "interrupt", "answered")]
    assert interrupted["questions"][0]["interrupted_by"] == "i2"  # type: ignore[index]
    assert ends(timeline(isolated, "c-merge")) == [
        ("m1", "enqueue", "answered"), ("m2", "enqueue", "answered"), ("m3", "merge", "merged")]
    assert ends(timeline(isolated, "c-steer")) == [("s1", "enqueue", "answered"), ("s2", "steer", "steered")]
    cancelled = timeline(isolated, "c-cancel")
    assert ends(cancelled) == [("x1", "enqueue", "answered"), ("x2", "enqueue", "cancelled")]
    assert cancelled["refusals"][0]["code"] == "question_started", "a started question is not cancelled"  # type: ignore[index]
    now = timeline(isolated, "c-now")
    assert ends(now) == [("n1", "enqueue", "interrupted"), ("n2", "enqueue", "answered"),
                         ("n3", "enqueue", "answered")]
    assert [q["sent_now_at"] is not None for q in now["questions"]] == [False, False, True]  # type: ignore[index]
    assert all(not timeline(isolated, c)["unaccounted"] for c in ("c-enqueue", "c-merge", "c-cancel", "c-now"))

    journal = open_journal(isolated)
    try:
        first = journal.execution("i1")
        assert first is not None and (first.state.value, first.transitions[-1].reason) == ("stopped", "interrupted")
    finally:
        journal.close()

"""X12 with a real pydantic-ai ``Agent`` (``FunctionModel``, no provider): one runtime function,
started twice on one conversation, told nothing but the policy (``enqueue``). The user asks again
while the first answer is being written; the second run waits for its turn (the runtime SDK's
``start``), then answers — in queue order, each answer to its own question, over the whole stack
(real Publication, Journal, relay and Delivery processes, real Kafka)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.contracts.topics import Topic
from imprint.runtime import RunWriter, run_scope
from imprint.runtime.kafka import KafkaControl, KafkaDecisions, KafkaTransport, KafkaTurns
from imprint.runtime.pydantic_ai import TOOL_NAME, AnswerPublication
from services.common.settings import Settings
from tests.support.agents import tool_returns
from tests.support.kafka import read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ACCOUNT = "acct-queue-agent"
CONVERSATION = "conv-queue-agent"
QUESTIONS = {"qa-1": "How high is Mont Blanc?", "qa-2": "And the Matterhorn?"}
WAIT = 90.0


def question_of(messages: list[ModelMessage]) -> str:
    return next(str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, UserPromptPart))


class Researcher:
    """The agent's model: a block answering the question, then a closing sentence. The first
    answer is held until the user has asked again (the second question is queued)."""

    def __init__(self) -> None:
        self.second_asked = asyncio.Event()
        self.calls: list[str] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        question = question_of(messages)
        self.calls.append(question)
        if question == QUESTIONS["qa-1"]:
            await asyncio.wait_for(self.second_asked.wait(), WAIT)
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {"markdown": f"On “{question}”:"},
                                                     tool_call_id=f"call-{len(self.calls)}")])
        return ModelResponse(parts=[TextPart(f"That answers “{question}”.")])


async def converse(settings: Settings) -> tuple[list[tuple[str, str]], Researcher]:
    model = Researcher()
    agent = Agent(FunctionModel(model))
    log: list[tuple[str, str]] = []
    prefix = settings.topic_prefix
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=prefix) as kafka, \
            KafkaDecisions(settings.kafka_bootstrap, topic_prefix=prefix) as decisions, \
            KafkaTurns(settings.kafka_bootstrap, topic_prefix=prefix) as turns, \
            KafkaControl(settings.kafka_bootstrap, topic_prefix=prefix) as control:

        async def runtime(run_id: str) -> None:
            """The runtime: it admits the question under ``enqueue`` and starts; nothing else."""
            run = RunWriter(kafka, run_id)
            await run.admit(account_id=ACCOUNT, conversation_id=CONVERSATION, message_id=f"msg-{run_id}",
                            question=QUESTIONS[run_id], policy="enqueue")
            await run.start(turns=turns, timeout=WAIT)
            log.append(("started", run_id))
            async with run_scope(run, control) as scope:
                result = await agent.run(QUESTIONS[run_id], capabilities=[
                    AnswerPublication(run, decisions, settle_timeout=60, scope=scope)])
            await run.complete("answered", answer_text=result.output)
            log.append(("completed", run_id))

        first = asyncio.create_task(runtime("qa-1"))
        while ("started", "qa-1") not in log:  # the first answer is being written…
            assert not first.done(), first
            await asyncio.sleep(0.05)
        second = asyncio.create_task(runtime("qa-2"))  # …when the user asks again
        await read_topic(settings, Topic.RUNS, timeout=WAIT, until=lambda vs: any(
            v["type"] == "conversation.question_queued" and v["run_id"] == "qa-2" for v in vs))
        model.second_asked.set()
        await asyncio.wait_for(asyncio.gather(first, second), WAIT)
    return log, model


@pytest.mark.rule("X12")
def test_a_pydantic_ai_agent_started_twice_on_one_conversation_answers_in_queue_order(isolated: Settings) -> None:
    with Stack(isolated):
        log, model = asyncio.run(converse(isolated))
        # Until every run is closed and every question ended: a conversation's queue facts are
        # keyed by the conversation and a run's by the run, so they share no partition and no
        # order on the topic — one may be read before the other was relayed.
        values: list[dict[str, Any]] = asyncio.run(read_topic(isolated, Topic.RUNS, timeout=WAIT, until=lambda vs: all(
            {v["run_id"] for v in vs if v["type"] == kind} >= set(QUESTIONS)
            for kind in ("run.closed", "conversation.question_ended"))))

    assert log == [("started", "qa-1"), ("completed", "qa-1"), ("started", "qa-2"), ("completed", "qa-2")]
    assert model.calls == [QUESTIONS["qa-1"]] * 2 + [QUESTIONS["qa-2"]] * 2, "the second agent ran after the first"
    closed = {v["run_id"]: v for v in values if v["type"] == "run.closed"}
    assert {r: (c["state"], c["answer_text"]) for r, c in closed.items()} == {
        r: ("completed", f"That answers “{q}”.") for r, q in QUESTIONS.items()}
    facts = [(v["type"].removeprefix("conversation."), v["run_id"]) for v in values
             if v["type"].startswith("conversation.")]
    assert facts == [("question_started", "qa-1"), ("question_queued", "qa-2"), ("question_ended", "qa-1"),
                     ("question_started", "qa-2"), ("question_ended", "qa-2")]
    assert [v["sequence"] for v in values if v["type"].startswith("conversation.")] == [1, 2, 3, 4, 5]

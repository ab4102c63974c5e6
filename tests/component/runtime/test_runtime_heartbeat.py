"""X10 — the runtime SDK heartbeats while a model or tool call is in flight, and only into
silence: a real pydantic-ai ``Agent`` whose ``FunctionModel`` and tool are slow, over an
in-memory transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from imprint.runtime import Heartbeats, MemoryTransport, RunWriter
from imprint.runtime.pydantic_ai import AnswerPublication
from tests.support.agents import tool_returns

EVERY = 0.05


def sent(transport: MemoryTransport) -> list[Any]:
    return [decode(Topic.RUNTIME, record.value) for record in transport.records]


def beats(transport: MemoryTransport) -> list[Any]:
    return [m for m in sent(transport) if m.type == "run.heartbeat"]


@pytest.mark.rule("X10")
async def test_heartbeats_go_out_while_a_call_is_silent_and_stop_when_it_ends() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1")
    await writer.start()
    async with Heartbeats(writer, every=EVERY).during("tool"):
        await asyncio.sleep(EVERY * 5)
    during = len(beats(transport))
    assert during >= 3, during
    await asyncio.sleep(EVERY * 3)
    assert len(beats(transport)) == during, "no heartbeat once nothing is in flight"
    ids = [m.event_id for m in beats(transport)]
    assert len(set(ids)) == len(ids), "each heartbeat is its own message"
    assert {m.in_flight for m in beats(transport)} == {"tool"}


@pytest.mark.rule("X10")
async def test_a_run_that_is_talking_sends_no_heartbeat() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1")
    async with Heartbeats(writer, every=0.1).during("model"):
        for n in range(20):  # four intervals' worth of talking
            await writer.stage("search", f"step {n}")  # any message renews the lease
            await asyncio.sleep(0.02)
    assert beats(transport) == []


@pytest.mark.rule("X10")
async def test_a_heartbeat_that_cannot_be_sent_never_fails_the_call() -> None:
    transport = MemoryTransport(fail_next=1)
    writer = RunWriter(transport, "run-1")
    async with Heartbeats(writer, every=EVERY).during("tool"):
        await asyncio.sleep(EVERY * 4)
    assert len(beats(transport)) >= 2, "the failed send was tried again"


def slow_researcher(delay: float):  # noqa: ANN201 — a FunctionModel function
    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not tool_returns(messages):
            await asyncio.sleep(delay)  # a model still producing its first response
            return ModelResponse(parts=[ToolCallPart("look_up", {"query": "boiling point"}, tool_call_id="call-1")])
        return ModelResponse(parts=[TextPart("100 °C at sea level.")])

    return respond


@pytest.mark.rule("X10")
async def test_the_capability_heartbeats_through_a_slow_model_request_and_a_slow_tool_call() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1")
    await writer.start()
    agent = Agent(FunctionModel(slow_researcher(EVERY * 6)))

    @agent.tool_plain
    async def look_up(query: str) -> str:
        await asyncio.sleep(EVERY * 6)  # a long search
        return json.dumps({"query": query, "found": "100 °C"})

    await agent.run("At what temperature does water boil?",
                    capabilities=[AnswerPublication(writer, heartbeat_seconds=EVERY)])
    kinds = [m.in_flight for m in beats(transport)]
    assert kinds.count("model") >= 3 and kinds.count("tool") >= 3, kinds
    settled = len(beats(transport))
    await asyncio.sleep(EVERY * 3)
    assert len(beats(transport)) == settled, "the run's calls are over: no more heartbeats"


@pytest.mark.rule("X10")
async def test_without_heartbeats_a_slow_call_is_silence() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1")
    agent = Agent(FunctionModel(slow_researcher(EVERY * 4)))

    @agent.tool_plain
    async def look_up(query: str) -> str:
        return "100 °C"

    await agent.run("At what temperature does water boil?",
                    capabilities=[AnswerPublication(writer, heartbeat_seconds=None)])
    assert beats(transport) == []

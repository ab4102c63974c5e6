"""X11 — a real pydantic-ai ``Agent`` under the runtime SDK's run scope, over an in-memory
transport: a stop request cancels the call in flight (a model request, a tool call), the run
ends ``stopped`` with nothing after it, and the agent starts nothing once the stop was asked
for, even under a tool that swallows the cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from imprint.runtime import MemoryTransport, RunWriter, StopRequests, run_scope
from imprint.runtime.pydantic_ai import AnswerPublication
from tests.support.agents import tool_returns

STEP = 0.05


def sent(transport: MemoryTransport) -> list[str]:
    return [decode(Topic.RUNTIME, record.value).type for record in transport.records]


def stop_when(stops: StopRequests, ready: Callable[[], bool], timeout: float = 30) -> None:
    """The user's stop arrives once ``ready()`` holds (the call to cancel is in flight), checked
    every ``STEP / 5`` for at most ``timeout`` seconds; then it arrives anyway."""
    async def later() -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not ready() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(STEP / 5)
        stops.observe(RunCancelRequested(run_id="run-1", account_id="acct-1"))

    asyncio.get_running_loop().create_task(later())


def looks_up_then_answers(model_requests: list[int]):  # noqa: ANN201 — a FunctionModel function
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        model_requests.append(len(messages))
        if not tool_returns(messages):
            return ModelResponse(parts=[TextPart("Looking it up."),
                                        ToolCallPart("look_up", {"query": "boiling point"}, tool_call_id="call-1")])
        return ModelResponse(parts=[TextPart("100 °C at sea level.")])

    return respond


@pytest.mark.rule("X11")
@pytest.mark.rule("X10")
async def test_a_stop_cancels_the_tool_call_in_flight_and_the_run_ends_stopped() -> None:
    transport, stops, model_requests, tool = MemoryTransport(), StopRequests(), [], []
    writer = RunWriter(transport, "run-1")
    await writer.start()
    agent = Agent(FunctionModel(looks_up_then_answers(model_requests)))

    @agent.tool_plain
    async def look_up(query: str) -> str:
        tool.append("searching")
        try:
            await asyncio.sleep(30)  # a slow search
        except asyncio.CancelledError:
            tool.append("cancelled")
            raise
        return "100 °C"

    # the stop comes while the slow tool is in flight and heartbeating
    stop_when(stops, lambda: tool == ["searching"] and "run.heartbeat" in sent(transport)[2:])
    async with run_scope(writer, stops) as scope:
        await agent.run("At what temperature does water boil?",
                        capabilities=[AnswerPublication(writer, heartbeat_seconds=STEP, scope=scope)])
    assert scope.stopped and tool == ["searching", "cancelled"] and len(model_requests) == 1
    types = sent(transport)
    said = [t for t in types if t != "run.heartbeat"]  # a busy machine may heartbeat the model request too
    assert said[:2] == ["run.started", "answer.text"] and "run.heartbeat" in types, "the slow tool was heartbeating"
    await asyncio.sleep(STEP * 4)
    assert sent(transport)[-1] == "run.stopped" and sent(transport).count("run.stopped") == 1, \
        "run.stopped is the last word: no heartbeat after it"


@pytest.mark.rule("X11")
async def test_an_agent_whose_tool_swallows_the_cancellation_starts_no_model_request_after_the_stop() -> None:
    transport, stops, model_requests = MemoryTransport(), StopRequests(), []
    writer = RunWriter(transport, "run-1")
    await writer.start()
    agent = Agent(FunctionModel(looks_up_then_answers(model_requests)))

    searching = []

    @agent.tool_plain
    async def look_up(query: str) -> str:
        searching.append(query)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "no result"  # careless: the cancellation is swallowed, the agent would go on
        return "100 °C"

    stop_when(stops, lambda: bool(searching))  # the stop comes while the tool is in flight
    async with run_scope(writer, stops) as scope:
        await agent.run("At what temperature does water boil?",
                        capabilities=[AnswerPublication(writer, heartbeat_seconds=None, scope=scope)])
    assert scope.stopped
    assert len(model_requests) == 1, "the capability started no second model request"
    assert sent(transport) == ["run.started", "answer.text", "run.stopped"]


@pytest.mark.rule("X11")
async def test_without_a_stop_the_scope_changes_nothing() -> None:
    transport, stops, model_requests = MemoryTransport(), StopRequests(), []
    writer = RunWriter(transport, "run-1")
    await writer.start()
    agent: Agent[Any, str] = Agent(FunctionModel(looks_up_then_answers(model_requests)))

    @agent.tool_plain
    async def look_up(query: str) -> str:
        return "100 °C"

    async with run_scope(writer, stops) as scope:
        result = await agent.run("At what temperature does water boil?",
                                 capabilities=[AnswerPublication(writer, heartbeat_seconds=None, scope=scope)])
    assert not scope.stopped and result.output == "100 °C at sea level."
    assert sent(transport) == ["run.started", "answer.text", "answer.text"]

"""X12 ``steer`` — a real pydantic-ai ``Agent`` under the runtime SDK's run scope, over an in-memory
transport: a newer question of the conversation handed to the running run (``run.steered``, as
``KafkaControl`` feeds it) joins the agent's next model request as the user's words, once, and the
run goes on (a steer is no stop)."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.contracts.conversation import RunSteered
from imprint.runtime import MemoryTransport, RunWriter, StopRequests, run_scope
from imprint.runtime.pydantic_ai import STEERED, AnswerPublication
from tests.support.agents import tool_returns

STEER = RunSteered(run_id="run-1", account_id="acct-1", conversation_id="conv-1", steered_run_id="run-2",
                   message_id="msg-2", question="Only in Europe, please.")


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart)]


@pytest.mark.rule("X12")
async def test_a_steered_question_joins_the_agents_next_model_request_once() -> None:
    stops, seen = StopRequests(), []
    writer = RunWriter(MemoryTransport(), "run-1")
    await writer.start()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(prompts(messages))
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("look_up", {"query": "tallest towers"}, tool_call_id="c1")])
        if len(tool_returns(messages)) == 1:
            return ModelResponse(parts=[ToolCallPart("look_up", {"query": "european towers"}, tool_call_id="c2")])
        return ModelResponse(parts=[TextPart("The tallest in Europe: the Ostankino Tower.")])

    agent = Agent(FunctionModel(respond))

    @agent.tool_plain
    async def look_up(query: str) -> str:
        if query == "tallest towers":
            stops.observe(STEER)  # the user asked again while the run was searching
        return f"results for {query}"

    async with run_scope(writer, stops) as scope:
        result = await agent.run("Which towers are the tallest?",
                                 capabilities=[AnswerPublication(writer, scope=scope, heartbeat_seconds=None)])
    assert not scope.stopped and result.output.startswith("The tallest in Europe")
    steered = STEERED.format(question="Only in Europe, please.")
    assert seen == [["Which towers are the tallest?"], ["Which towers are the tallest?", steered],
                    ["Which towers are the tallest?", steered]], "added once, kept in the run's history"

"""The pydantic-ai capability over an in-memory transport, with a real ``Agent`` and
``FunctionModel`` (no provider), and a stand-in Publication that answers each proposal."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from imprint.contracts.publication import AnswerPublished, AnswerRevisionRejected, CommittedBlock, Content, Receipt
from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from imprint.publication.block_ids import issue_block_id
from imprint.runtime import Decisions, MemoryTransport, Record, RunWriter
from imprint.runtime.pydantic_ai import TOOL_NAME, AnswerPublication
from tests.support.agents import tool_returns

BLOCK_ID = re.compile(r"blk_[0-9a-f]{32}")


class StandInPublication(MemoryTransport):
    """Answers every ``answer.part`` as Publication would for a valid block: a new block id
    on first commit, the same id in place for a ``replaces`` it issued, invalid_target otherwise."""

    def __init__(self, decisions: Decisions) -> None:
        super().__init__()
        self.decisions = decisions
        self.issued: dict[str, int] = {}

    async def send(self, record: Record) -> None:
        await super().send(record)
        message = decode(Topic.RUNTIME, record.value)
        if message.type != "answer.part":
            return
        candidate = f"tool:{message.tool_call_id}"
        target = message.arguments.get("replaces")
        if target is not None and target not in self.issued:
            self.decisions.observe(AnswerRevisionRejected(run_id=message.run_id, candidate_id=candidate,
                                                          target_block_id=target, reason="invalid_target"))
            return
        block_id = target or issue_block_id(message.run_id, candidate, 0)
        self.issued[block_id] = self.issued.get(block_id, 0) + 1
        self.decisions.observe(AnswerPublished(run_id=message.run_id, block=CommittedBlock(
            block_id=block_id, revision=self.issued[block_id], delivery_ordinal=len(self.issued),
            candidate_id=candidate, content=Content(type="text", markdown=message.arguments["markdown"]),
            source_hint="sources_unverified", body_sha256="0" * 64,
            receipt=Receipt(receipt_id="r", log_position=1, committed_at=message.occurred_at))))


def writes_text_then_a_block_then_revises_it(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = tool_returns(messages)
    if not seen:
        return ModelResponse(parts=[TextPart("Water boils at 100 °C at sea level."),
                                    ToolCallPart(TOOL_NAME, {"markdown": "First draft."}, tool_call_id="call-1")])
    if len(seen) == 1:
        block = BLOCK_ID.search(seen[0])
        assert block, seen[0]
        return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {"markdown": "Revised.", "replaces": block.group()},
                                                 tool_call_id="call-2")])
    if len(seen) == 2:
        return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {"markdown": "Guess.", "replaces": "blk_guessed"},
                                                 tool_call_id="call-3")])
    return ModelResponse(parts=[TextPart("That is the answer.")])


@pytest.mark.rule("P1")
@pytest.mark.rule("P12")
async def test_the_agent_writes_text_and_blocks_and_revises_by_the_id_the_host_issued() -> None:
    decisions = Decisions()
    transport = StandInPublication(decisions)
    writer = RunWriter(transport, "run-1")
    agent = Agent(FunctionModel(writes_text_then_a_block_then_revises_it))
    result = await agent.run("How hot does water boil?",
                             capabilities=[AnswerPublication(writer, decisions, settle_timeout=1)])

    sent = [json.loads(r.value) for r in transport.records]
    assert [(m["type"], m.get("tool_call_id")) for m in sent] == [
        ("answer.text", None), ("answer.part", "call-1"), ("tool.receipt", "call-1"),
        ("answer.part", "call-2"), ("tool.receipt", "call-2"), ("answer.part", "call-3"), ("tool.receipt", "call-3"),
        ("answer.text", None),
    ], "text goes out before the tool calls of its own response"
    assert sent[0]["text"] == "Water boils at 100 °C at sea level." and sent[0]["segment"] == 0
    assert sent[-1]["text"] == result.output == "That is the answer."
    assert sent[0]["turn_id"] != sent[-1]["turn_id"], "each model response is its own turn (its own candidate)"
    first = issue_block_id("run-1", "tool:call-1", 0)
    assert sent[3]["arguments"] == {"markdown": "Revised.", "replaces": first}
    told = tool_returns(result.all_messages())
    assert told[0] == f"Block {first} committed (revision 1, position 1, sources_unverified)."
    assert told[1] == f"Block {first} revised in place (revision 2, position 1, sources_unverified)."
    assert told[2] == "Revision of blk_guessed rejected: invalid_target; that block is unchanged."


@pytest.mark.rule("P12")
async def test_the_tool_tells_the_model_what_replaces_means() -> None:
    seen: dict[str, object] = {}

    def look(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (tool,) = info.function_tools
        seen.update(name=tool.name, description=tool.description, schema=tool.parameters_json_schema)
        return ModelResponse(parts=[TextPart("ok")])

    writer = RunWriter(MemoryTransport(), "run-1")
    await Agent(FunctionModel(look)).run("hi", capabilities=[AnswerPublication(writer)])
    replaces = seen["schema"]["properties"]["replaces"]["description"]  # type: ignore[index]
    assert seen["name"] == "send_answer_part"
    assert "revise an earlier block in place" in replaces and "block id" in replaces
    assert "does not add a block" in replaces


@pytest.mark.rule("P1")
async def test_without_a_decisions_reader_the_tool_still_sends_and_says_no_block_id_is_known() -> None:
    def once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if tool_returns(messages):
            return ModelResponse(parts=[TextPart("   ")])
        return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {"markdown": "A block."}, tool_call_id="c1")])

    transport = MemoryTransport()
    result = await Agent(FunctionModel(once)).run("hi", capabilities=[AnswerPublication(RunWriter(transport, "r"))])
    assert [json.loads(r.value)["type"] for r in transport.records] == ["answer.part", "tool.receipt"], \
        "blank text is not sent as a candidate"
    assert "block ids are not reported" in tool_returns(result.all_messages())[0]


@pytest.mark.rule("P1")
async def test_a_streamed_response_forwards_its_whole_text_once_before_its_tool_call() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo):  # type: ignore[no-untyped-def]
        if tool_returns(messages):
            yield "Bye."
            return
        yield "Hel"
        yield "lo."
        yield {0: DeltaToolCall(name=TOOL_NAME, json_args='{"markdown": "A', tool_call_id="c1")}
        yield {0: DeltaToolCall(json_args=' block."}')}

    async def drain(ctx: object, events: AsyncIterable[object]) -> None:
        async for _ in events:
            pass

    transport = MemoryTransport()
    await Agent(FunctionModel(stream_function=stream)).run(
        "hi", capabilities=[AnswerPublication(RunWriter(transport, "r"))], event_stream_handler=drain)
    sent = [json.loads(r.value) for r in transport.records]
    assert [(m["type"], m.get("text") or m.get("arguments")) for m in sent] == [
        ("answer.text", "Hello."), ("answer.part", {"markdown": "A block."}), ("tool.receipt", None),
        ("answer.text", "Bye."),
    ]

"""A real pydantic-ai ``Agent`` (``FunctionModel``, no provider) reports its run through
the runtime SDK over real Kafka; the real Publication, relay, journal and Delivery
processes settle it; a real HTTP client reads the SSE stream.

The model writes plain text and calls ``send_answer_part`` for a new block in one
response, then revises that block with ``replaces`` = the block id the tool told it
(learned from ``imprint.publication.v1``, never invented), then ends with text."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaDecisions, KafkaTransport
from imprint.runtime.pydantic_ai import TOOL_NAME, AnswerPublication
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.agents import tool_returns
from tests.support.sse import Frame, read_frames
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ACCOUNT = "acct-agent"
BLOCK_ID = re.compile(r"blk_[0-9a-f]{32}")
TEXT = "Water boils at 100 °C at sea level [[cite:src:handbook]]."
DRAFT = "At altitude water boils lower."
REVISED = "At altitude water boils lower: about 93 °C at 2,000 m [[cite:src:handbook]]."
CLOSING = "In short: 100 °C at sea level, less higher up."


def researcher(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    told = tool_returns(messages)
    if not told:
        return ModelResponse(parts=[TextPart(TEXT), ToolCallPart(TOOL_NAME, {"markdown": DRAFT}, tool_call_id="call-1")])
    if len(told) == 1:
        block = BLOCK_ID.search(told[0])
        assert block, f"the tool did not tell the model a block id: {told[0]!r}"
        return ModelResponse(parts=[ToolCallPart(TOOL_NAME, {"markdown": REVISED, "replaces": block.group()},
                                                 tool_call_id="call-2")])
    return ModelResponse(parts=[TextPart(CLOSING)])


async def run_agent(settings: Settings, stack: Stack, run_id: str, token: str) -> tuple[list[Frame], list[str], Any]:
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as kafka, \
            KafkaDecisions(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix) as decisions:
        run = RunWriter(kafka, run_id)
        await run.admit(account_id=ACCOUNT, conversation_id=f"conv-{run_id}", message_id=f"msg-{run_id}",
                        question="At what temperature does water boil?")
        await run.queue()
        await run.start()
        await run.grant("src:handbook", scope="public", owner_account_id="registry", title="Handbook")
        await asyncio.to_thread(stack.wait_for_run, run_id, token)
        # A client watching live from before the first block to done.
        watcher = asyncio.create_task(asyncio.to_thread(
            read_frames, stack.base_url, run_id, token, until=lambda fs: any(f.event == "done" for f in fs),
            timeout=120))
        agent = Agent(FunctionModel(researcher))
        result = await agent.run("At what temperature does water boil?",
                                 capabilities=[AnswerPublication(run, decisions, settle_timeout=60)])
        await run.complete("answered", answer_text=result.output)
        live = await watcher
    return live, tool_returns(result.all_messages()), result


def fold(frames: list[Frame]) -> dict[str, dict[str, Any]]:
    """What a client shows: each block frame's ``block`` replaces that block's entry."""
    blocks: dict[str, dict[str, Any]] = {}
    for frame in frames:
        if frame.event not in {"answer-preview", "answer-publication", "answer-withdrawn"}:
            continue
        data = frame.json
        if data.get("superseded"):
            continue
        if data.get("block") is None:
            blocks.pop(data["block_id"], None)
        else:
            blocks[data["block"]["block_id"]] = data["block"]
    return blocks


@pytest.mark.rule("P1")
@pytest.mark.rule("P12")
@pytest.mark.rule("P18")
@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
def test_a_pydantic_ai_agent_publishes_text_and_a_block_and_revises_the_block_in_place(isolated: Settings) -> None:
    run_id = "run-agent-1"
    token = mint_token(isolated, ACCOUNT)
    with Stack(isolated) as stack:
        live, told, result = asyncio.run(run_agent(isolated, stack, run_id, token))
        replay = read_frames(stack.base_url, run_id, token, until=lambda fs: any(f.event == "done" for f in fs))

    first = BLOCK_ID.search(told[0])
    assert first, told
    block_id = first.group()
    assert told[0].startswith(f"Block {block_id} committed (revision 1, position 2"), told[0]
    assert told[1].startswith(f"Block {block_id} revised in place (revision 2, position 2"), told[1]

    for frames in (live, replay):
        shown = sorted(fold(frames).values(), key=lambda b: b["delivery_ordinal"])
        assert [(b["delivery_ordinal"], b["content"]["markdown"], b["revision"]) for b in shown] == [
            (1, TEXT, 1), (2, REVISED, 2), (3, CLOSING, 1)], "the block was revised in place, not added"
        assert shown[1]["block_id"] == block_id and shown[1]["saved"] is True
        assert shown[0]["candidate_id"].startswith("text:") and shown[2]["candidate_id"].startswith("text:"), \
            "plain text is its own candidate (entry A)"
        assert shown[0]["candidate_id"] != shown[2]["candidate_id"]
        assert shown[1]["candidate_id"] == "tool:call-2"
        assert shown[0]["source_hint"] == shown[1]["source_hint"] == "sources_verified"
        ids = [f.id for f in frames if f.id is not None]
        assert ids == sorted(set(ids)), "per-run monotonically increasing frame ids"
        assert [f.event for f in frames][-2:] == ["stream-summary", "done"]
        assert "".join(f.json["text"] if isinstance(f.json, dict) else "" for f in frames
                       if f.event == "content") == result.output

    revisions = [f.json["block"] for f in live if f.event == "answer-publication"
                 and not f.json.get("superseded") and f.json["block"]["block_id"] == block_id]
    assert {b["delivery_ordinal"] for b in revisions} == {2}, "every revision keeps the block's position"
    assert all(f.json["block"]["content"]["markdown"] != REVISED for f in live
               if f.event == "answer-publication" and f.json.get("block") and f.json["block"]["block_id"] != block_id)


@pytest.mark.rule("P12")
@pytest.mark.rule("P18")
@pytest.mark.rule("D2")
def test_the_demo_plays_on_the_sdk_and_its_first_block_is_revised_in_place(
    isolated: Settings, capsys: pytest.CaptureFixture[str],
) -> None:
    from services.demo import ACCOUNT as DEMO_ACCOUNT, _watch, run_demo

    with Stack(isolated) as stack:
        assert asyncio.run(run_demo(isolated, watch=False)) == 0
        played = capsys.readouterr().out
        run_id = re.search(r"demo run (demo-[0-9a-f]{8}) played onto " + re.escape(isolated.topic("imprint.runtime.v1")),
                           played).group(1)  # type: ignore[union-attr]
        token = mint_token(isolated, DEMO_ACCOUNT)
        stack.wait_for_run(run_id, token)
        assert asyncio.run(_watch(stack.base_url, run_id, token)) == 0
        watched = capsys.readouterr().out.splitlines()
    saved = [re.search(r"block (blk_[0-9a-f]{8})… r(\d+) #(\d+) saved sources_verified: (.*)", line)
             for line in watched if "answer-publication" in line and " saved " in line]
    last = {m.group(1): (int(m.group(2)), int(m.group(3)), m.group(4)) for m in saved if m}  # the newest frame wins
    assert sorted(last.values()) == [
        (1, 2, "Your own field notes agree with the trend [[cite:src:demo-ac"),
        (2, 1, "2024 was the warmest year on record, about 1.55 °C above the"),
    ], watched
    shown = {block[:12] for line in watched for block in re.findall(r"blk_[0-9a-f]{8}", line)}
    assert len(shown) == 2, "the revision replaced the first block: no third block on the stream"
    assert watched[-1].split()[-2:] == ["done", "[DONE]"]

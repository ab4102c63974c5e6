"""``imprint demo``: a scripted research run played onto Kafka, then watched over SSE.

Admission, evidence grants (one public, one private to the same account), a numeric
handle, two blocks through both entries, a revision of the first block, and the
completion. The revision names the block id the Host issued, learned from
``imprint.publication.v1`` — the runtime never invents block ids."""

from __future__ import annotations

import json
import time
import uuid

import httpx
from aiokafka import AIOKafkaConsumer

from imprint.contracts.base import Message
from imprint.contracts.runtime import (
    AnswerPart,
    AnswerText,
    EvidenceGranted,
    EvidenceItem,
    EvidenceSet,
    NumericIssued,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunQueued,
    RunStage,
    RunStarted,
    ToolReceipt,
)
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.kafka import Outbox, make_broker
from services.delivery.auth import mint_token

ACCOUNT = "demo-account"


async def _first_block_id(settings: Settings, run_id: str, timeout: float = 60) -> str:
    consumer = AIOKafkaConsumer(settings.topic(Topic.PUBLICATION), bootstrap_servers=settings.kafka_bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)
    await consumer.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    value = json.loads(record.value)
                    if value.get("type") == "answer.published" and value.get("run_id") == run_id:
                        return str(value["block"]["block_id"])
    finally:
        await consumer.stop()
    raise TimeoutError("the first block was not published; is the stack running?")


def script(run_id: str) -> tuple[list[Message], list[Message]]:
    conversation = f"conv-{run_id}"
    before = [
        RunAdmitted(run_id=run_id, account_id=ACCOUNT, conversation_id=conversation, message_id=f"msg-{run_id}",
                    question="How warm was 2024 compared with the pre-industrial baseline?",
                    qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}")),
        RunQueued(run_id=run_id),
        RunStarted(run_id=run_id),
        RunStage(run_id=run_id, stage="retrieval", detail="searching sources"),
        EvidenceGranted(run_id=run_id, source_id="src:wmo-2024-state-of-climate", scope="public",
                        owner_account_id="registry", title="WMO State of the Global Climate 2024"),
        EvidenceGranted(run_id=run_id, source_id="src:demo-account/field-notes", scope="private",
                        owner_account_id=ACCOUNT, title="Your field notes"),
        NumericIssued(run_id=run_id, handle_id="h:anomaly-2024", value="1.55", unit="°C", version=1,
                      source_id="src:wmo-2024-state-of-climate"),
        RunStage(run_id=run_id, stage="writing", detail="drafting the answer"),
        AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id="call-1", sealed=True, arguments={
            "markdown": "2024 was about [[num:h:anomaly-2024]] above the 1850–1900 average "
                        "[[cite:src:wmo-2024-state-of-climate]]."}),
        ToolReceipt(run_id=run_id, tool_call_id="call-1", status="ok"),
        AnswerText(run_id=run_id, turn_id="turn-2", segment=0,
                   text="Your own field notes agree with the trend [[cite:src:demo-account/field-notes]]."),
    ]
    after = [
        ToolReceipt(run_id=run_id, tool_call_id="call-3", status="ok"),
        RunCompleted(run_id=run_id, outcome="answered",
                     answer_text="2024 was about 1.55 °C above the pre-industrial average.",
                     evidence=EvidenceSet(items=[EvidenceItem(source_id="src:wmo-2024-state-of-climate",
                                                              title="WMO State of the Global Climate 2024",
                                                              excerpt="…1.55 °C ± 0.13 °C above the 1850-1900 average…")],
                                          snapshot_id="snap-1", knowledge_version="kv-2024-12")),
    ]
    return before, after


async def run_demo(settings: Settings, *, watch: bool = True) -> int:
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    broker = make_broker(settings, "imprint-demo")
    await broker.connect()
    outbox = Outbox(broker, settings)
    before, after = script(run_id)
    try:
        await outbox.publish_many((Topic.RUNTIME, m) for m in before)
        first = await _first_block_id(settings, run_id)
        revision = AnswerPart(run_id=run_id, turn_id="turn-3", tool_call_id="call-3", sealed=True, arguments={
            "replaces": first,
            "markdown": "2024 was the warmest year on record, about [[num:h:anomaly-2024]] above the 1850–1900 "
                        "average [[cite:src:wmo-2024-state-of-climate]]."})
        await outbox.publish_many((Topic.RUNTIME, m) for m in [revision, *after])
    finally:
        await broker.stop()
    token = mint_token(settings, ACCOUNT)
    base = f"http://{settings.http_host}:{settings.http_port}"
    print(f"demo run {run_id} played onto {settings.topic(Topic.RUNTIME)}", flush=True)
    print(f"watch it in a browser: {base}/#run={run_id}&token={token}", flush=True)
    print(f"or: curl -N -H 'Authorization: Bearer {token}' {base}/v1/runs/{run_id}/events", flush=True)
    if watch:
        return await _watch(base, run_id, token)
    return 0


async def _watch(base: str, run_id: str, token: str, timeout: float = 90) -> int:
    """Print the run's SSE frames until ``done``."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    event, frame_id = "message", ""
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5)) as client:
        async with client.stream("GET", f"{base}/v1/runs/{run_id}/events", headers=headers) as response:
            if response.status_code != 200:
                print(f"stream refused: {response.status_code}", flush=True)
                return 1
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    frame_id = line[3:].strip()
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    print(f"  [{frame_id:>3}] {event:<20} {_summary(event, line[5:].strip())}", flush=True)
                    if event == "done":
                        return 0
    return 1


def _summary(event: str, data: str) -> str:
    try:
        value = json.loads(data)
    except ValueError:
        return data[:100]
    if not isinstance(value, dict):
        return data[:100]
    if value.get("superseded") or ("block" in value and value["block"] is None):
        return f"{value.get('block_id', '')} (superseded by a later frame)".strip()
    block = value.get("block") or {}
    if "block_id" in block:
        text = block.get("content", {}).get("markdown", "")
        return (f"block {block['block_id'][:12]}… r{block.get('revision')} #{block.get('delivery_ordinal')} "
                f"{value.get('status', '')} {block.get('source_hint')}: {text[:60]}")
    return data[:100]

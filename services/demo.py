"""``imprint demo``: a scripted research run played onto Kafka through the runtime SDK,
then watched over SSE.

Admission, evidence grants (one public, one private to the same account), a numeric
handle, two blocks through both entries, a revision of the first block, and the
completion. The revision names the block id the Host issued, learned from
``imprint.publication.v1`` (:class:`~imprint.runtime.kafka.KafkaDecisions`) — the
runtime never invents block ids."""

from __future__ import annotations

import json
import uuid

import httpx

from imprint.contracts.publication import AnswerPublished
from imprint.contracts.runtime import EvidenceItem, EvidenceSet
from imprint.contracts.topics import Topic
from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaDecisions, KafkaTransport
from services.common.settings import Settings
from services.delivery.auth import mint_token

ACCOUNT = "demo-account"
WMO = "src:wmo-2024-state-of-climate"


async def play(run: RunWriter, decisions: KafkaDecisions, timeout: float = 60) -> None:
    """The scripted run. ``decisions`` must be started before this is called."""
    run_id = run.run_id
    await run.admit(account_id=ACCOUNT, conversation_id=f"conv-{run_id}", message_id=f"msg-{run_id}",
                    question="How warm was 2024 compared with the pre-industrial baseline?")
    await run.queue()
    await run.start()
    await run.stage("retrieval", "searching sources")
    await run.grant(WMO, scope="public", owner_account_id="registry", title="WMO State of the Global Climate 2024")
    await run.grant("src:demo-account/field-notes", scope="private", owner_account_id=ACCOUNT, title="Your field notes")
    await run.issue_number("h:anomaly-2024", "1.55", unit="°C", source_id=WMO)
    await run.stage("writing", "drafting the answer")
    first = decisions.expect(run_id, "tool:call-1")
    try:
        part = await run.send_answer_part(
            {"markdown": "2024 was about [[num:h:anomaly-2024]] above the 1850–1900 average [[cite:" + WMO + "]]."},
            tool_call_id="call-1", turn_id="turn-1")
        await run.tool_receipt("call-1")
        await run.text("Your own field notes agree with the trend [[cite:src:demo-account/field-notes]].",
                       turn_id="turn-2")
        settled = await first.expecting(part.blocks).wait(timeout)
    finally:
        decisions.forget(run_id, "tool:call-1")
    published = [d.block.block_id for d in settled if isinstance(d, AnswerPublished)]
    if not published:
        raise TimeoutError("the first block was not published; is the stack running?")
    await run.send_answer_part(
        {"replaces": published[0],
         "markdown": "2024 was the warmest year on record, about [[num:h:anomaly-2024]] above the 1850–1900 "
                     "average [[cite:" + WMO + "]]."},
        tool_call_id="call-3", turn_id="turn-3")
    await run.tool_receipt("call-3")
    await run.complete("answered", answer_text="2024 was about 1.55 °C above the pre-industrial average.",
                       evidence=EvidenceSet(items=[EvidenceItem(source_id=WMO,
                                                                title="WMO State of the Global Climate 2024",
                                                                excerpt="…1.55 °C ± 0.13 °C above the 1850-1900 average…")],
                                            snapshot_id="snap-1", knowledge_version="kv-2024-12"))


async def run_demo(settings: Settings, *, watch: bool = True) -> int:
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    async with KafkaTransport(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix,
                              client_id="imprint-demo") as kafka, \
            KafkaDecisions(settings.kafka_bootstrap, topic_prefix=settings.topic_prefix,
                           client_id="imprint-demo") as decisions:
        await play(RunWriter(kafka, run_id), decisions)
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

"""The runtime SDK's writer over an in-memory transport: ids, retries, contracts, order."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from imprint.contracts.registry import decode
from imprint.contracts.runtime import AnswerPart, AnswerText, EvidenceItem, EvidenceSet
from imprint.contracts.topics import Topic
from imprint.publication.candidate import Candidate, intake
from imprint.runtime import IdentityConflict, MemoryTransport, RunWriter, event_id_for


class Ticking:
    """A clock that moves on every reading, so a rebuilt message would differ in ``occurred_at``."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


async def play(writer: RunWriter) -> None:
    await writer.admit(account_id="acct-1", conversation_id="conv-1", message_id="msg-1", question="Why?")
    await writer.queue()
    await writer.start()
    await writer.stage("retrieval", "searching")
    await writer.grant("src:a", scope="public", owner_account_id="registry", title="A")
    await writer.issue_number("h:1", "1.55", unit="°C")
    await writer.text("Plain text.", turn_id="turn-1")
    await writer.send_answer_part({"markdown": "A block [[cite:src:a]]."}, tool_call_id="call-1", turn_id="turn-2")
    await writer.tool_receipt("call-1")
    await writer.complete("answered", answer_text="Done.",
                          evidence=EvidenceSet(items=[EvidenceItem(source_id="src:a")]))


@pytest.mark.rule("P1")
async def test_event_ids_are_derived_from_the_run_and_the_message_identity() -> None:
    first, second = MemoryTransport(), MemoryTransport()
    await play(RunWriter(first, "run-1", clock=Ticking()))
    await play(RunWriter(second, "run-1", clock=Ticking()))
    assert [r.value for r in first.records] == [r.value for r in second.records]
    ids = [json.loads(r.value)["event_id"] for r in first.records]
    assert len(set(ids)) == len(ids)
    assert ids[0] == str(event_id_for("run-1", "run.admitted"))
    other = MemoryTransport()
    await play(RunWriter(other, "run-2", clock=Ticking()))
    assert not set(ids) & {json.loads(r.value)["event_id"] for r in other.records}, "ids are run-scoped"


@pytest.mark.rule("P1")
@pytest.mark.rule("P19")
async def test_a_retried_call_after_a_lost_acknowledgement_resends_the_same_bytes() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1", clock=Ticking())
    transport.fail_next = 1
    with pytest.raises(ConnectionError):
        await writer.send_answer_part({"markdown": "Once."}, tool_call_id="call-1", turn_id="turn-1")
    proposal = await writer.send_answer_part({"markdown": "Once."}, tool_call_id="call-1", turn_id="turn-1")
    assert len(transport.records) == 2
    assert transport.records[0] == transport.records[1], "value, key and headers byte-identical, occurred_at too"
    assert proposal.candidate_id == "tool:call-1" and proposal.blocks == 1

    await writer.text("Hello.", turn_id="turn-2", segment=0)
    await writer.text("Hello.", turn_id="turn-2", segment=0)
    assert transport.records[2] == transport.records[3]


@pytest.mark.rule("P17")
async def test_reusing_an_identity_for_other_content_is_refused_not_sent() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-1")
    await writer.send_answer_part({"markdown": "First."}, tool_call_id="call-1", turn_id="turn-1")
    with pytest.raises(IdentityConflict):
        await writer.send_answer_part({"markdown": "Other."}, tool_call_id="call-1", turn_id="turn-1")
    assert len(transport.records) == 1


@pytest.mark.rule("P1")
@pytest.mark.rule("P3")
@pytest.mark.rule("X1")
async def test_every_record_is_a_v1_runtime_message_keyed_by_run_and_both_entries_are_candidates() -> None:
    transport = MemoryTransport()
    await play(RunWriter(transport, "run-1"))
    types = []
    for record in transport.records:
        assert record.topic == Topic.RUNTIME and record.key == b"run-1"
        message = decode(Topic.RUNTIME, record.value)
        assert dict(record.headers) == {"type": message.type.encode()}
        types.append(message.type)
        if isinstance(message, (AnswerText, AnswerPart)):
            candidate = intake(message, len(record.value))
            assert isinstance(candidate, Candidate)
            assert candidate.candidate_id in {"text:turn-1:0", "tool:call-1"}
    assert types == ["run.admitted", "run.queued", "run.started", "run.stage", "evidence.granted",
                     "numeric.issued", "answer.text", "answer.part", "tool.receipt", "run.completed"]


@pytest.mark.rule("P6")
async def test_a_proposal_counts_its_blocks_as_publication_will() -> None:
    writer = RunWriter(MemoryTransport(), "run-1")
    several = await writer.send_answer_part({"blocks": [{"markdown": "a"}, {"markdown": "b"}]},
                                            tool_call_id="c1", turn_id="t1")
    inline_and_blocks = await writer.send_answer_part({"markdown": "x", "blocks": [{"markdown": "y"}]},
                                                      tool_call_id="c2", turn_id="t1")
    as_json_text = await writer.send_answer_part('{"markdown": "z"}', tool_call_id="c3", turn_id="t1")
    assert (several.blocks, inline_and_blocks.blocks, as_json_text.blocks) == (2, 2, 1)


class Slow(MemoryTransport):
    """Acknowledges later sends sooner: without the writer's ordering, they would land first."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.02

    async def send(self, record):  # type: ignore[no-untyped-def]
        self.delay = max(0.0, self.delay - 0.002)
        await asyncio.sleep(self.delay)
        await super().send(record)


@pytest.mark.rule("P18")
async def test_concurrent_calls_keep_call_order_within_each_run_key() -> None:
    transport = Slow()
    one, two = RunWriter(transport, "run-1"), RunWriter(transport, "run-2")

    async def parts(writer: RunWriter) -> None:
        await asyncio.gather(*(writer.send_answer_part({"markdown": f"{writer.run_id} block {i}"},
                                                       tool_call_id=f"call-{i}", turn_id="turn-1")
                               for i in range(10)))

    await asyncio.gather(parts(one), parts(two))
    for run_id, records in transport.by_key().items():
        bodies = [json.loads(r.value)["arguments"]["markdown"] for r in records]
        assert bodies == [f"{run_id.decode()} block {i}" for i in range(10)]

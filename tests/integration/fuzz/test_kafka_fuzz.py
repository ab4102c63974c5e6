"""Hostile input at scale on every topic a part consumes (SPEC §7, P3, R8): the bounded fuzz tier.

Each part runs as its real process on its store (the ``store_backend`` of the test) and its
real Kafka topics. For each topic it consumes, ``--fuzz-values`` records (10,000 by default)
are produced in batches: hostile ones (``tests.support.hostile``: schema-aware and
byte-level damage to valid messages, hostile keys and headers, empty and oversized values)
with valid messages interleaved. Then:

* no crash: the process is alive; no stall: its consumer group's committed offset reaches
  the end of every partition of the topic;
* every record ends in a typed outcome, counted: a dead letter naming its offset with the
  original bytes (sha256 and size), or — what decodes — applied by the part (a refusal it
  records or the effect it has), or — a record whose ``type`` header names a type of the
  topic the part does not act on — left undecoded; the counts add up to the records sent;
* the valid interleaved messages are applied exactly once: each one's effect is the effect
  the same message had on a run or source of its own before the barrage (the same events,
  or the same view);
* what was committed before the barrage is unchanged.

The seed is printed and named in every failure (``--fuzz-seed`` replays it)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from imprint.contracts.base import Message
from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested, RunLeaseLapsed
from imprint.contracts.registry import TOPIC_OF_TYPE, TRANSPORT_CAP_BYTES, decode
from imprint.contracts.runtime import (
    AnswerPart, AnswerText, ModelFrame, NumericIssued, RunCompleted, RunFailed, RunHeartbeat, RunStage, RunStarted,
    RunStopped, ToolReceipt,
)
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.contracts.topics import Topic
from imprint.journal import ids as journal_ids
from imprint.journal.handling import APPLIED_TYPES as JOURNAL_APPLIES
from imprint.publication import PublicationRun
from imprint.publication.sources import SourceRecord
from services.common.settings import Settings
from services.delivery.auth import mint_token
from services.journal.application import RuntimeJournal
from services.publication.application import open_log
from tests.integration.publication.pubsupport import admitted, granted, part, registered
from tests.support import delivery_builders as view
from tests.support.hostile import Record, barrage, honest
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ACCOUNT = "acct-fz"
TYPES = sorted(TOPIC_OF_TYPE)
PRODUCE_BYTES = 4 * 1024 * 1024


# --------------------------------------------------------------------------- what a topic gets

@dataclass
class Plan:
    """One consumed topic: messages to damage, valid ones to interleave and the reference
    one applied before the barrage, and how a valid message's effect is read."""

    topic: Topic
    seeds: list[Message]
    valid: Callable[[int], list[Message]]
    reference: list[Message]
    """Valid messages of the same kind, applied before the barrage: their effect is what each
    interleaved one must have (the first is the reference, the others are reference of nothing)."""
    effect: Callable[[Any, Message], Any]
    setup: Callable[[int], list[Message]] = lambda n: []
    """Messages (on other topics) the valid ones need before they come, e.g. their runs' admission."""


@dataclass
class Outcomes:
    counts: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)


def run_admitted(run: str) -> Message:
    return admitted(run, ACCOUNT)


def runtime_seeds() -> list[Message]:
    run = "run-fz-seed"
    return [run_admitted(run), RunStarted(run_id=run), RunStage(run_id=run, stage="search", detail="d"),
            RunHeartbeat(run_id=run, in_flight="model"), granted(run, "src-fz-seed"),
            NumericIssued(run_id=run, handle_id="h1", value="12.5", unit="kg", version=1),
            AnswerText(run_id=run, turn_id="t1", segment=0, text="Some [[cite:src-fz-seed]] text."),
            part(run, "c-seed", "A proposed block [[num:h1]]."),
            ToolReceipt(run_id=run, tool_call_id="c-seed", status="ok"),
            RunCompleted(run_id=run, outcome="answered", answer_text="done"), RunStopped(run_id=run),
            RunFailed(run_id=run, reason="x"), ModelFrame(run_id=run, payload={"a": [1, 2]})]


def sources_seeds() -> list[Message]:
    return [registered("src-fz-seed"), SourceRevoked(source_id="src-fz-seed", account_id=ACCOUNT, reason="r"),
            SourceTombstoned(source_id="src-fz-seed")]


def control_seeds() -> list[Message]:
    run = "run-fz-seed"
    return [RunCancelRequested(run_id=run, account_id=ACCOUNT),
            RunLeaseLapsed(run_id=run, account_id=ACCOUNT, conversation_id="conv-fz-seed"),
            ConversationDeleteRequested(conversation_id="conv-fz-seed", account_id=ACCOUNT)]


def publication_seeds() -> list[Message]:
    run = "run-fz-seed"
    return [view.preview(run, "blk-fz", 1, "Preview."), view.published(run, "blk-fz", 1, "Published."),
            view.unchanged(run, "tool:c", "blk-fz", 1), view.withdrawn(run, "blk-fz"),
            view.rejected(run, "tool:c"), view.revision_rejected(run, "tool:c", "blk-fz"),
            view.save_failed(run, "tool:c", ["blk-fz"]), view.save_unknown(run, "tool:c", ["blk-fz"]),
            view.settled(run)]


def runs_seeds() -> list[Message]:
    run = "run-fz-seed"
    return [view.running(run, ACCOUNT), view.progress(run, "search", account=ACCOUNT),
            view.closed(run, account=ACCOUNT), view.deleted(run, "conv-fz-seed", account=ACCOUNT)]


def names(events: Iterator[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def plans(part_name: str) -> list[Plan]:
    """What each consumed topic of the part gets (``services/<part>/consumer.py`` lists them)."""
    if part_name == "publication":
        def run_effect(app: Any, m: Any) -> Any:
            return names(app.events.get(PublicationRun.id_for(m.run_id)))

        return [
            Plan(Topic.RUNTIME, runtime_seeds(), lambda n: [part(f"run-fz-v{i}", "c-v", "Valid block.") for i in range(n)],
                 [part("run-fz-vref", "c-v", "Valid block.")], run_effect,
                 setup=lambda n: [run_admitted(f"run-fz-v{i}") for i in ["ref", *map(str, range(n))]]),
            Plan(Topic.SOURCES, sources_seeds(), lambda n: [registered(f"src-fz-v{i}") for i in range(n)],
                 [registered("src-fz-ref")], lambda app, m: names(app.events.get(SourceRecord.id_for(m.source_id)))),
            Plan(Topic.CONTROL, control_seeds(),
                 lambda n: [RunLeaseLapsed(run_id=f"run-fz-l{i}", account_id=ACCOUNT, conversation_id=f"conv-run-fz-l{i}")
                            for i in range(n)],
                 [RunLeaseLapsed(run_id="run-fz-lref", account_id=ACCOUNT, conversation_id="conv-run-fz-lref")], run_effect,
                 setup=lambda n: [run_admitted(f"run-fz-l{i}") for i in ["ref", *map(str, range(n))]]),
        ]
    if part_name == "journal":
        def execution(app: Any, m: Any) -> Any:
            return names(app.events.get(journal_ids.execution_id(m.run_id)))

        return [
            Plan(Topic.RUNTIME, runtime_seeds(), lambda n: [run_admitted(f"run-fz-v{i}") for i in range(n)],
                 [run_admitted("run-fz-ref")], execution),
            Plan(Topic.PUBLICATION, publication_seeds(),
                 lambda n: [view.published(f"run-fz-p{i}", "blk-v", 1, "Valid.") for i in range(n)],
                 [view.published("run-fz-pref", "blk-v", 1, "Valid.")], execution,
                 setup=lambda n: [run_admitted(f"run-fz-p{i}") for i in ["ref", *map(str, range(n))]]),
            Plan(Topic.SOURCES, sources_seeds(), lambda n: [SourceTombstoned(source_id=f"src-fz-v{i}") for i in range(n)],
                 [SourceTombstoned(source_id="src-fz-ref")],
                 lambda app, m: names(app.events.get(journal_ids.source_id(m.source_id)))),
            Plan(Topic.CONTROL, control_seeds(),
                 lambda n: [RunCancelRequested(run_id=f"run-fz-c{i}", account_id=ACCOUNT) for i in range(n)],
                 [RunCancelRequested(run_id="run-fz-cref", account_id=ACCOUNT)], execution,
                 setup=lambda n: [run_admitted(f"run-fz-c{i}") for i in ["ref", *map(str, range(n))]]),
        ]
    assert part_name == "delivery"

    def shown(client: Any, m: Any) -> Any:
        response = client.get(f"/v1/runs/{m.run_id}")
        body = response.json() if response.status_code == 200 else {}
        return response.status_code, {k: v for k, v in body.items() if k not in {"run_id", "conversation_id"}}

    return [
        Plan(Topic.RUNS, runs_seeds(), lambda n: [view.running(f"run-fz-v{i}", ACCOUNT) for i in range(n)],
             [view.running("run-fz-ref", ACCOUNT)], shown),
        Plan(Topic.PUBLICATION, publication_seeds(),
             lambda n: [view.published(f"run-fz-p{i}", "blk-v", 1, "Valid.") for i in range(n)],
             [view.published("run-fz-pref", "blk-v", 1, "Valid.")], shown,
             setup=lambda n: [view.running(f"run-fz-p{i}", ACCOUNT) for i in ["ref", *map(str, range(n))]]),
    ]


def base(part_name: str) -> list[Message]:
    """A run committed before the barrage, whose record must not change."""
    run = "run-fz-base"
    if part_name == "publication":
        return [run_admitted(run), part(run, "base-1", "Committed before the barrage."), part(run, "base-2", "Second.")]
    if part_name == "journal":
        return [run_admitted(run), RunStarted(run_id=run), view.published(run, "blk-base", 1, "Base."),
                RunCompleted(run_id=run, outcome="answered", answer_text="The base answer.")]
    return [view.running(run, ACCOUNT), view.published(run, "blk-base", 1, "Base."), view.settled(run),
            view.closed(run, account=ACCOUNT)]


# --------------------------------------------------------------------------- reading the part

@contextmanager
def reader(part_name: str, settings: Settings) -> Iterator[Any]:
    if part_name == "publication":
        app = open_log(settings)
    elif part_name == "journal":
        app = RuntimeJournal.from_settings(settings)
    else:
        token = mint_token(settings, ACCOUNT)
        with httpx.Client(base_url=f"http://{settings.http_host}:{settings.http_port}", timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            yield client
        return
    try:
        yield app
    finally:
        app.close()


def snapshot(part_name: str, settings: Settings) -> Any:
    run = "run-fz-base"
    with reader(part_name, settings) as app:
        if part_name == "publication":
            return [(type(e).__name__, e.originator_version) for e in app.events.get(PublicationRun.id_for(run))]
        if part_name == "journal":
            return [(type(e).__name__, e.originator_version) for e in app.events.get(journal_ids.execution_id(run))]
        return app.get(f"/v1/runs/{run}").json()


# --------------------------------------------------------------------------- Kafka

async def produce(settings: Settings, topic: Topic, records: Sequence[Record]) -> list[tuple[int, int]]:
    """Every record, pipelined (the producer batches them); their (partition, offset)s."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=20,
                                max_batch_size=512 * 1024, max_request_size=PRODUCE_BYTES)
    await producer.start()
    try:
        positions: list[tuple[int, int]] = []
        for start in range(0, len(records), 2000):
            futures = [await producer.send(settings.topic(topic), r.value, key=r.key, headers=list(r.headers))
                       for r in records[start:start + 2000]]
            positions += [((m := await f).partition, m.offset) for f in futures]
        return positions
    finally:
        await producer.stop()


async def raise_limit(settings: Settings, topics: Sequence[Topic]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, settings.topic(t),
                                                  configs={"max.message.bytes": str(PRODUCE_BYTES)}) for t in topics])
    finally:
        await admin.close()


async def send_valid(settings: Settings, messages: Sequence[Message]) -> None:
    if messages:
        by_topic: dict[Topic, list[Record]] = {}
        for m in messages:
            by_topic.setdefault(TOPIC_OF_TYPE[m.type], []).append(honest(m))
        for topic, records in by_topic.items():
            await produce(settings, topic, records)


async def wait_consumed(settings: Settings, consumer: str, topics: Sequence[Topic], timeout: float) -> None:
    """No stall: the group's committed offsets reach the end of every partition of ``topics``."""
    probe = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=f"{settings.group_prefix}.{consumer}",
                             enable_auto_commit=False)
    await probe.start()
    try:
        partitions = [TopicPartition(settings.topic(t), p) for t in topics
                      for p in (probe.partitions_for_topic(settings.topic(t)) or {0})]
        ends = await probe.end_offsets(partitions)
        deadline = time.monotonic() + timeout
        while True:
            behind = {}
            for tp in partitions:
                committed = await probe.committed(tp)
                if (committed or 0) < ends[tp]:
                    behind[f"{tp.topic}#{tp.partition}"] = (committed, ends[tp])
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{consumer} stalled: committed/end {behind}")
            await asyncio.sleep(0.5)
    finally:
        await probe.stop()


async def dead_letters(settings: Settings, consumer: str) -> list[Any]:
    """Every dead letter ``consumer`` wrote so far (read to the topic's end)."""
    from imprint.contracts.deadletter import DeadLetter
    reader_ = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                               auto_offset_reset="earliest", max_partition_fetch_bytes=PRODUCE_BYTES)
    await reader_.start()
    try:
        topic = settings.topic(Topic.DEADLETTER)
        partitions = [TopicPartition(topic, p) for p in (reader_.partitions_for_topic(topic) or {0})]
        reader_.assign(partitions)
        ends = await reader_.end_offsets(partitions)
        letters = []
        while [tp for tp in partitions if await reader_.position(tp) < ends[tp]]:
            for records in (await reader_.getmany(timeout_ms=1000, max_records=5000)).values():
                letters += [letter for r in records if (letter := DeadLetter.model_validate_json(r.value)).consumer == consumer]
        return letters
    finally:
        await reader_.stop()


# --------------------------------------------------------------------------- the oracle

def expected(topic: Topic, record: Record, applies: frozenset[str] | None) -> str:
    """What the contract says becomes of a record (the consumer must agree)."""
    if applies is not None:
        kind = next((v.decode("utf-8", "replace") for k, v in record.headers if k == "type"), None)
        if kind is not None and kind not in applies and TOPIC_OF_TYPE.get(kind) == topic:
            return "left_undecoded"
    if len(record.value) > TRANSPORT_CAP_BYTES:
        return "dead_letter"
    try:
        decode(topic, record.value)
    except Exception:  # noqa: BLE001 — the oracle: anything that does not decode is refused
        return "dead_letter"
    return "applied"


def outcomes_of(topic: Topic, records: Sequence[Record], positions: Sequence[tuple[int, int]], letters: Sequence[Any],
                settings: Settings, applies: frozenset[str] | None, seed: int) -> Counter[str]:
    by_position = {(letter.partition, letter.offset): letter for letter in letters if letter.topic == settings.topic(topic)}
    counts: Counter[str] = Counter()
    problems: list[str] = []
    for record, position in zip(records, positions, strict=True):
        want = expected(topic, record, applies)
        letter = by_position.pop(position, None)
        if want == "dead_letter":
            if letter is None:
                problems.append(f"{position} {record.kind}: not dead-lettered")
                continue
            if (letter.original_sha256, letter.original_size) != (hashlib.sha256(record.value).hexdigest(), len(record.value)):
                problems.append(f"{position} {record.kind}: the dead letter does not carry the original bytes")
            if not letter.original_truncated and letter.original != record.value:
                problems.append(f"{position} {record.kind}: the dead letter's bytes differ")
            counts[f"dead_letter:{letter.reason}"] += 1
        elif letter is not None:
            if letter.reason != "processing_error":
                problems.append(f"{position} {record.kind}: {want} by the contract, dead-lettered {letter.reason}")
            counts[f"dead_letter:{letter.reason}"] += 1
        else:
            counts["valid:applied" if record.valid else want] += 1
    problems += [f"{position}: a dead letter for no record sent" for position in by_position]
    assert not problems, f"seed {seed}, {topic}: {len(problems)} records without their outcome:\n" + "\n".join(problems[:20])
    return counts


# --------------------------------------------------------------------------- the test

APPLIES = {"publication": None, "journal": JOURNAL_APPLIES, "delivery": None}
VALID_EVERY = 100
"""One valid message among this many records."""


@pytest.mark.rule("P3")
@pytest.mark.rule("R8")
@pytest.mark.parametrize("part_name", ["publication", "journal", "delivery"])
def test_every_hostile_record_on_every_consumed_topic_ends_in_a_typed_outcome(
    part_name: str, isolated: Settings, fuzz_values: int, fuzz_seed: int,
) -> None:
    s = isolated
    topic_plans = plans(part_name)
    n_valid = max(fuzz_values // VALID_EVERY, 1)
    asyncio.run(raise_limit(s, [p.topic for p in topic_plans]))
    print(f"\nfuzz seed {fuzz_seed} (replay: --fuzz-seed={fuzz_seed} --fuzz-values={fuzz_values})")
    with Stack(s, parts=(part_name,)) as stack:
        asyncio.run(send_valid(s, base(part_name)))
        asyncio.run(send_valid(s, [m for plan in topic_plans for m in plan.setup(n_valid)]))
        asyncio.run(wait_consumed(s, part_name, [p.topic for p in topic_plans], timeout=120))
        # a reference after what it needs (its run's admission travels on another topic)
        asyncio.run(send_valid(s, [m for plan in topic_plans for m in plan.reference]))
        asyncio.run(wait_consumed(s, part_name, [p.topic for p in topic_plans], timeout=120))
        before = snapshot(part_name, s)
        with reader(part_name, s) as app:
            references = [plan.effect(app, plan.reference[0]) for plan in topic_plans]
        assert before and all(references), f"the part applied neither the base run nor the references: {references}"

        sent: dict[Topic, tuple[list[Record], list[tuple[int, int]], list[Message]]] = {}
        started = time.monotonic()
        for index, plan in enumerate(topic_plans):
            valid = plan.valid(n_valid)
            records = barrage(fuzz_seed + index, plan.seeds, valid, fuzz_values, types=TYPES)
            sent[plan.topic] = (records, asyncio.run(produce(s, plan.topic, records)), valid)
        produced = time.monotonic() - started
        asyncio.run(wait_consumed(s, part_name, [p.topic for p in topic_plans], timeout=420))
        consumed = time.monotonic() - started
        assert stack.processes[part_name].poll() is None, f"seed {fuzz_seed}: {part_name} crashed"
        letters = asyncio.run(dead_letters(s, part_name))
        after = snapshot(part_name, s)

        table = []
        with reader(part_name, s) as app:
            for plan, reference in zip(topic_plans, references, strict=True):
                records, positions, valid = sent[plan.topic]
                counts = outcomes_of(plan.topic, records, positions, letters, s, APPLIES[part_name], fuzz_seed)
                assert sum(counts.values()) == len(records), f"seed {fuzz_seed}: outcomes {counts} != {len(records)} sent"
                wrong = [m for m in valid if plan.effect(app, m) != reference]
                assert not wrong, (f"seed {fuzz_seed}, {plan.topic}: {len(wrong)} of {len(valid)} valid messages "
                                   f"not applied exactly once; first: {plan.effect(app, wrong[0])} != {reference}")
                table.append((plan.topic.value, len(records), counts))
    assert after == before, f"seed {fuzz_seed}: the run committed before the barrage changed"

    print(f"{part_name} on {s.database_url and 'postgres' or 'sqlite'}: produced in {produced:.1f}s, "
          f"consumed in {consumed:.1f}s")
    print(f"  {'topic':<28} {'sent':>7}  outcomes")
    for topic, total, counts in table:
        print(f"  {topic:<28} {total:>7}  " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))

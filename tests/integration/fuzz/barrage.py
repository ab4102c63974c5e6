"""The Kafka fuzz tier's one procedure (SPEC §7, P3, R8), run by ``test_fuzz_<part>.py`` for
each part: the part's real process on its store (the test's ``store_backend``) and its real
topics. For each topic the part consumes (its :class:`Part`'s :class:`Plan`\\ s, one per
topic of ``services/<part>/consumer.py``), ``--fuzz-values`` records (10,000 by default) are
produced in batches: hostile ones (:mod:`tests.support.hostile`) with a valid message among
every :data:`VALID_EVERY`. Then:

* no crash: the process is alive; no stall: its consumer group's committed offset reaches
  the end of every partition of the topics;
* every record ends in a typed outcome, counted: a dead letter naming its offset with the
  original bytes (sha256, size, and the bytes themselves when not cut), or — what the
  contract decodes — applied by the part (a refusal it records or the effect it has;
  ``ignored`` when its type is none of the part's business, ``applies``), or — a record
  whose ``type`` header names a type of the topic the part does not act on — left
  undecoded; the counts add up to the records sent;
* each valid interleaved message is applied exactly once: its effect is the effect the same
  kind of message had on a run or source of its own before the barrage (the same events,
  or the same view);
* what was committed before the barrage is unchanged.

The seed is printed and named in every failure (``--fuzz-seed`` replays it)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from imprint.contracts.base import Message
from imprint.contracts.deadletter import DeadLetter
from imprint.contracts.registry import TOPIC_OF_TYPE, TRANSPORT_CAP_BYTES, decode
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from tests.support.hostile import Record, barrage, honest
from tests.support.stack import Stack

ACCOUNT = "acct-fz"
BASE_RUN = "run-fz-base"
TYPES = sorted(TOPIC_OF_TYPE)
PRODUCE_BYTES = 4 * 1024 * 1024
"""Records up to this size are produced (the topics' limit is raised to it): the oversized
ones are over the 1 MiB transport cap (P3)."""
VALID_EVERY = 100
"""One valid message among this many records."""


@dataclass
class Plan:
    """One consumed topic: messages to damage (``seeds``), the valid ones to interleave, and
    ``reference``: one of their kind applied before the barrage, whose effect each valid
    one must have. ``setup``: what the valid ones need first (their runs' admission)."""

    topic: Topic
    seeds: list[Message]
    valid: Callable[[int], list[Message]]
    reference: Message
    effect: Callable[[Any, Message], Any]
    setup: Callable[[int], list[Message]] = lambda n: []


@dataclass
class Part:
    name: str
    plans: list[Plan]
    base: list[Message]
    """A run committed before the barrage, whose record must not change."""
    reader: Callable[[Settings], AbstractContextManager[Any]]
    """What the part's effects are read through (its log, or its HTTP API)."""
    snapshot: Callable[[Any], Any]
    """The base run's record, read through ``reader``."""
    applies: frozenset[str] | None = None
    """The types the consumer decodes, when it leaves others undecoded by their header."""
    classify: Callable[[Any, Topic, list[tuple[Message, int]]], list[str]] | None = None
    """What became of each decoded hostile message (with its size) of a topic, read through
    ``reader`` (e.g. ``refused:<reason>``): an assertion fails for one with no outcome."""


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


def send_valid(settings: Settings, messages: Sequence[Message]) -> None:
    by_topic: dict[Topic, list[Record]] = {}
    for m in messages:
        by_topic.setdefault(TOPIC_OF_TYPE[m.type], []).append(honest(m))
    for topic, records in by_topic.items():
        asyncio.run(produce(settings, topic, records))


async def wait_consumed(settings: Settings, consumer: str, topics: Sequence[Topic], timeout: float,
                        replay: str = "") -> None:
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
                raise AssertionError(f"{replay}: {consumer} stalled: committed/end {behind}")
            await asyncio.sleep(0.5)
    finally:
        await probe.stop()


async def dead_letters(settings: Settings, consumer: str) -> list[DeadLetter]:
    """Every dead letter ``consumer`` wrote so far (the topic read to its end)."""
    reader = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                              auto_offset_reset="earliest", max_partition_fetch_bytes=PRODUCE_BYTES)
    await reader.start()
    try:
        topic = settings.topic(Topic.DEADLETTER)
        partitions = [TopicPartition(topic, p) for p in (reader.partitions_for_topic(topic) or {0})]
        reader.assign(partitions)
        ends = await reader.end_offsets(partitions)
        letters = []
        while [tp for tp in partitions if await reader.position(tp) < ends[tp]]:
            for records in (await reader.getmany(timeout_ms=1000, max_records=5000)).values():
                letters += [letter for r in records
                            if (letter := DeadLetter.model_validate_json(r.value)).consumer == consumer]
        return letters
    finally:
        await reader.stop()


def expected(topic: Topic, record: Record, applies: frozenset[str] | None) -> tuple[str, Any]:
    """What the contract says becomes of a record (the consumer must agree), and the message
    it decodes to."""
    if applies is not None:
        kind = next((v.decode("utf-8", "replace") for k, v in record.headers if k == "type"), None)
        if kind is not None and kind not in applies and TOPIC_OF_TYPE.get(kind) == topic:
            return "left_undecoded", None
    if len(record.value) > TRANSPORT_CAP_BYTES:
        return "dead_letter", None
    try:
        return "applied", decode(topic, record.value)
    except Exception:  # noqa: BLE001 — the oracle: anything that does not decode is refused
        return "dead_letter", None


def outcomes(settings: Settings, topic: Topic, records: Sequence[Record], positions: Sequence[tuple[int, int]],
             letters: Sequence[DeadLetter], part: Part, app: Any, seed: int) -> Counter[str]:
    """Each record's outcome, checked against the contract; their counts."""
    applies = part.applies
    decoded: list[tuple[Message, int]] = []
    by_position = {(letter.partition, letter.offset): letter for letter in letters
                   if letter.topic == settings.topic(topic)}
    counts: Counter[str] = Counter()
    problems: list[str] = []
    for record, position in zip(records, positions, strict=True):
        want, message = expected(topic, record, applies)
        letter = by_position.pop(position, None)
        if want == "dead_letter":
            if letter is None:
                problems.append(f"{position} {record.kind}: not dead-lettered")
                continue
            if (letter.original_sha256, letter.original_size) != (hashlib.sha256(record.value).hexdigest(),
                                                                  len(record.value)):
                problems.append(f"{position} {record.kind}: the dead letter does not carry the original bytes")
            elif not letter.original_truncated and letter.original != record.value:
                problems.append(f"{position} {record.kind}: the dead letter's bytes differ")
            counts[f"dead_letter:{letter.reason}"] += 1
        elif letter is not None:
            if letter.reason != "processing_error":
                problems.append(f"{position} {record.kind}: {want} by the contract, dead-lettered {letter.reason}")
            counts[f"dead_letter:{letter.reason}"] += 1
        elif want == "applied" and not record.valid and part.classify is not None:
            decoded.append((message, len(record.value)))
        elif want == "applied" and not record.valid:  # decoded; the part's business, or not (``applies``)
            counts[f"{'ignored' if applies is not None and message.type not in applies else 'applied'}:{message.type}"] += 1
        else:
            counts["valid:applied" if record.valid else want] += 1
    problems += [f"{position}: a dead letter for no record sent" for position in by_position]
    if decoded and part.classify is not None:
        counts.update(f"applied:{label}" for label in part.classify(app, topic, decoded))
    assert not problems, (f"seed {seed}, {topic}: {len(problems)} records without their outcome:\n"
                          + "\n".join(problems[:20]))
    return counts


def fuzz(part: Part, settings: Settings, values: int, seed: int) -> str:
    """The barrage on every topic ``part`` consumes, and every check of the module's doc;
    returns the table of outcomes per topic (the test records it as its ``fuzz`` property,
    which ``make test`` prints at the end)."""
    s, topics = settings, [plan.topic for plan in part.plans]
    n_valid = max(values // VALID_EVERY, 1)
    replay = f"seed {seed} (replay: --fuzz-seed={seed} --fuzz-values={values})"
    print(f"\nfuzz {part.name}: {replay}")
    asyncio.run(raise_limit(s, topics))
    with Stack(s, parts=(part.name,)) as stack:
        send_valid(s, [*part.base, *(m for plan in part.plans for m in plan.setup(n_valid))])
        asyncio.run(wait_consumed(s, part.name, topics, timeout=120, replay=replay))
        send_valid(s, [plan.reference for plan in part.plans])  # after their runs' admission (another topic)
        asyncio.run(wait_consumed(s, part.name, topics, timeout=120, replay=replay))
        with part.reader(s) as app:
            before = part.snapshot(app)
            references = [plan.effect(app, plan.reference) for plan in part.plans]
        assert before and all(references), f"{replay}: the base run or a reference was not applied: {references}"

        sent = []
        started = time.monotonic()
        for index, plan in enumerate(part.plans):
            valid = plan.valid(n_valid)
            records = barrage(seed + index, plan.seeds, valid, values, types=TYPES)
            sent.append((records, asyncio.run(produce(s, plan.topic, records)), valid))
        produced = time.monotonic() - started
        asyncio.run(wait_consumed(s, part.name, topics, timeout=240, replay=replay))
        consumed = time.monotonic() - started
        assert stack.processes[part.name].poll() is None, f"{replay}: {part.name} crashed"
        letters = asyncio.run(dead_letters(s, part.name))

        table = []
        with part.reader(s) as app:
            assert part.snapshot(app) == before, f"{replay}: the run committed before the barrage changed"
            for plan, reference, (records, positions, valid) in zip(part.plans, references, sent, strict=True):
                counts = outcomes(s, plan.topic, records, positions, letters, part, app, seed)
                assert sum(counts.values()) == len(records), f"{replay}: outcomes {counts} != {len(records)} sent"
                wrong = [m for m in valid if plan.effect(app, m) != reference]
                assert not wrong, (f"{replay}, {plan.topic}: {len(wrong)} of {len(valid)} valid messages not applied "
                                   f"exactly once; first: {plan.effect(app, wrong[0])} != {reference}")
                table.append((plan.topic.value, len(records), counts))

    backend = "postgres" if s.database_url else "sqlite"
    lines = [f"{part.name} on {backend}, {replay}: {values * len(topics)} records produced in {produced:.1f}s, "
             f"all consumed after {consumed:.1f}s",
             f"  {'topic':<24} {'sent':>7}  outcomes"]
    lines += [f"  {topic:<24} {total:>7}  " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
              for topic, total, counts in table]
    print("\n".join(lines))
    return "\n".join(lines)

"""Real-broker helpers for tests: topics, producing raw bytes, reading a topic to the end."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.partitioner import DefaultPartitioner

from imprint.contracts.base import Message
from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from services.common.settings import Settings


def create_topics(settings: Settings, partitions: int | None = None) -> None:
    """Every contract topic under the settings' prefix, with ``partitions`` partitions
    (default: ``settings.topic_partitions``)."""
    partitions = partitions or settings.topic_partitions
    CREATED.extend((settings.kafka_bootstrap, settings.topic(t)) for t in Topic)

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(settings.topic(t), num_partitions=partitions, replication_factor=1) for t in Topic]
            )
        except TopicAlreadyExistsError:
            pass
        finally:
            await admin.close()

    asyncio.run(create())


def partition_of(settings: Settings, key: str) -> int:
    """The partition a message keyed ``key`` (a run_id or source_id) lands on: Kafka's
    default partitioner (murmur2), as imprint's producers use it."""
    partitions = list(range(settings.topic_partitions))
    return int(DefaultPartitioner()(key.encode(), partitions, partitions))


def key_beside(settings: Settings, key: str, stem: str) -> str:
    """A key (``stem-N``) that lands on the same partition as ``key``: a marker sent after
    ``key``'s messages is then consumed after them, as it was on a single partition."""
    return next(f"{stem}-{n}" for n in range(10_000) if partition_of(settings, f"{stem}-{n}") == partition_of(settings, key))


CREATED: list[tuple[str, str]] = []
"""(bootstrap, topic) of every topic this test session created, deleted when it ends."""


def delete_created_topics() -> None:
    """Every topic the session created, deleted in one request per broker once the tests are
    over (not one by one as each test ends: deleting while other tests create topics kept a
    single broker busy re-electing leaders). A developer's broker otherwise keeps every old
    test's partitions, and recovering tens of thousands of them on restart takes minutes.
    Best effort: a topic already gone is fine."""
    by_broker: dict[str, list[str]] = {}
    for bootstrap, topic in CREATED:
        by_broker.setdefault(bootstrap, []).append(topic)
    CREATED.clear()

    async def delete(bootstrap: str, topics: list[str]) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            for start in range(0, len(topics), 500):
                try:
                    await admin.delete_topics(topics[start:start + 500], timeout_ms=30_000)
                except KafkaError:
                    pass
        finally:
            await admin.close()

    for bootstrap, topics in by_broker.items():
        try:
            asyncio.run(delete(bootstrap, topics))
        except (KafkaError, OSError):
            pass


async def produce(settings: Settings, topic: Topic, *messages: Message | bytes, key: bytes | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for message in messages:
            if isinstance(message, bytes):
                await producer.send_and_wait(settings.topic(topic), message, key=key)
            else:
                k = getattr(message, "key", None)
                await producer.send_and_wait(
                    settings.topic(topic), encode(message), key=k.encode() if isinstance(k, str) else key,
                    headers=[("type", message.type.encode())],
                )
    finally:
        await producer.stop()


async def read_topic(
    settings: Settings,
    topic: Topic,
    *,
    until: Callable[[list[dict[str, Any]]], bool],
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Read ``topic`` from the beginning until ``until(values)`` holds; fails on timeout."""
    consumer = AIOKafkaConsumer(
        settings.topic(topic), bootstrap_servers=settings.kafka_bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False, group_id=None,
    )
    await consumer.start()
    values: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while not until(values):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out reading {topic}: {len(values)} messages: "
                                     f"{[v.get('type') for v in values]}")
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                values.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return values

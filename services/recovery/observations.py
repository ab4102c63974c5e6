"""Reads what was *announced* about a run from Kafka, for the inspector and ``recover``.

Two topics carry facts no store keeps: ``imprint.publication.v1`` (previews and
save-unknowns are emitted, never logged: P14, P15) and ``imprint.delivery.v1``
(what Delivery sent and what clients say they received and rendered: D4). Both are
keyed by run id, so one run's messages sit in one partition: this reader assigns
that partition (no consumer group, nothing committed), reads it from the beginning
to the end offset it found on arrival and keeps the run's messages.

These observations are displayed beside the log; they never feed an answer view.
A broker that does not answer within ``timeout`` gives :class:`Observations` with
``available=False`` and the reason, never an exception."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)

OBSERVED_TOPICS = (Topic.PUBLICATION, Topic.DELIVERY)


@dataclass
class Observations:
    available: bool
    reason: str = ""
    messages: list[Any] = field(default_factory=list)
    """Decoded contract messages of the run, in partition order per topic."""


def read_observations(settings: Settings, run_id: str | None, topics: Iterable[Topic] = OBSERVED_TOPICS,
                      types: frozenset[str] | None = None, timeout: float = 15.0) -> Observations:
    """Synchronous wrapper (the CLI); in async code use :func:`observe`."""
    return asyncio.run(observe(settings, run_id, topics, types, timeout))


async def observe(settings: Settings, run_id: str | None, topics: Iterable[Topic] = OBSERVED_TOPICS,
                  types: frozenset[str] | None = None, timeout: float = 15.0) -> Observations:
    """The messages of ``run_id`` (every run: ``None``) on ``topics``, optionally only of ``types``."""
    try:
        return await asyncio.wait_for(_read(settings, run_id, tuple(topics), types), timeout)
    except TimeoutError:
        return Observations(False, f"Kafka at {settings.kafka_bootstrap} did not answer within {timeout:.0f} s")
    except Exception as error:  # noqa: BLE001 — an operator view degrades, it does not crash
        log.warning("observations unavailable", error=type(error).__name__)
        return Observations(False, f"Kafka at {settings.kafka_bootstrap}: {type(error).__name__}: {error}")


async def _read(settings: Settings, run_id: str | None, topics: tuple[Topic, ...],
                types: frozenset[str] | None) -> Observations:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # here: replay's workers import this module and never read Kafka
    from aiokafka.partitioner import DefaultPartitioner

    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                request_timeout_ms=10_000, metadata_max_age_ms=5_000)
    await consumer.start()
    try:
        wanted: list[tuple[TopicPartition, Topic]] = []
        key = run_id.encode() if run_id is not None else None
        for topic in topics:
            name = settings.topic(topic)
            partitions = sorted(await _partitions(consumer, name))
            if not partitions:
                continue
            chosen = partitions if key is None else [DefaultPartitioner()(key, partitions, partitions)]
            wanted.extend((TopicPartition(name, p), topic) for p in chosen)
        if not wanted:
            return Observations(True)
        consumer.assign([tp for tp, _ in wanted])
        ends = await consumer.end_offsets([tp for tp, _ in wanted])
        await consumer.seek_to_beginning(*(tp for tp, _ in wanted))
        contract = {tp: topic for tp, topic in wanted}
        pending = {tp for tp, _ in wanted if ends[tp] > 0}
        messages: list[Any] = []
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=500, max_records=2000)
            for tp, records in batches.items():
                for record in records:
                    if key is not None and record.key != key:
                        continue
                    try:
                        message = decode(contract[tp], record.value)
                    except Exception:  # noqa: BLE001 — the dead-letter topic's business, not ours
                        continue
                    if types is None or message.type in types:
                        messages.append(message)
            for tp in list(pending):
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
        return Observations(True, "", messages)
    finally:
        await consumer.stop()


async def _partitions(consumer: Any, topic: str) -> set[int]:
    known = consumer.partitions_for_topic(topic)
    if known:
        return set(known)
    # aiokafka's public ``topics()`` fetches the cluster's metadata but keeps only the names;
    # the same call's partitions are what an assigned (group-less) reader needs.
    cluster = await consumer._client.fetch_all_metadata()  # noqa: SLF001
    return set(cluster.partitions_for_topic(topic) or ())

"""Kafka wiring of the Runtime journal: four topics in, tracked batches into its log.

X10: every record of ``imprint.runtime.v1`` renews its run's lease before the poll is
applied (decoded or not: a proposal renews it as a heartbeat does); the partitions of
that topic this instance is given or loses carry their runs' leases with them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRecord

from faststream.kafka import KafkaBroker

from imprint.contracts.topics import Topic
from imprint.journal.handling import APPLIED_TYPES
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.kafka import Outbox
from services.common.subscription import store_work, subscribe_tracked
from services.journal.application import RuntimeJournal

JOURNAL_TOPICS = (Topic.RUNTIME, Topic.PUBLICATION, Topic.SOURCES, Topic.CONTROL)
GATHER_MS = 50
"""The journal records what happened; nobody waits on it per message (a run's transitions
reach Delivery through it, a few per run): its fetches gather up to this long."""


def runtime_shards(settings: Settings, tracking_names: Sequence[str]) -> list[int]:
    """The partitions of ``imprint.runtime.v1`` among ``<topic>#<partition>`` names: the shards of X10."""
    runtime = settings.topic(Topic.RUNTIME)
    return [int(partition) for topic, _, partition in (name.rpartition("#") for name in tracking_names)
            if topic == runtime]


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, journal: RuntimeJournal) -> None:
    runtime = settings.topic(Topic.RUNTIME)

    async def handle(batch: list[Inbound]) -> None:
        await store_work(len(batch), settings.inline_poll_records, journal.process, batch)

    async def revoked(tracking_names: list[str]) -> None:
        await asyncio.to_thread(journal.revoked, tracking_names)
        await asyncio.to_thread(journal.drop_shards, runtime_shards(settings, tracking_names))

    async def assigned(tracking_names: list[str]) -> None:
        await asyncio.to_thread(journal.take_shards, runtime_shards(settings, tracking_names))

    def observe(records: Sequence[ConsumerRecord[Any, Any]]) -> None:
        journal.renew(record.key.decode("utf-8", "replace") for record in records
                      if record.topic == runtime and record.key)

    subscribe_tracked(broker, settings, outbox, consumer="journal", topics=JOURNAL_TOPICS, handle=handle,
                      on_revoked=revoked, applies=APPLIED_TYPES, gather_ms=GATHER_MS,
                      on_assigned=assigned, observe=observe)

"""Kafka wiring of the Runtime journal: four topics in, tracked batches into its log."""

from __future__ import annotations

import asyncio

from faststream.kafka import KafkaBroker

from imprint.contracts.topics import Topic
from imprint.journal.handling import APPLIED_TYPES
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.kafka import Outbox, subscribe_tracked
from services.journal.application import RuntimeJournal

JOURNAL_TOPICS = (Topic.RUNTIME, Topic.PUBLICATION, Topic.SOURCES, Topic.CONTROL)
GATHER_MS = 50
"""The journal records what happened; nobody waits on it per message (a run's transitions
reach Delivery through it, a few per run): its fetches gather up to this long."""


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, journal: RuntimeJournal) -> None:
    async def handle(batch: list[Inbound]) -> None:
        await asyncio.to_thread(journal.process, batch)

    async def revoked(tracking_names: list[str]) -> None:
        await asyncio.to_thread(journal.revoked, tracking_names)

    subscribe_tracked(broker, settings, outbox, consumer="journal", topics=JOURNAL_TOPICS, handle=handle,
                      on_revoked=revoked, applies=APPLIED_TYPES, gather_ms=GATHER_MS)

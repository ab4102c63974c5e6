"""Kafka wiring of Delivery: publication and runs topics → the view store → live streams."""

from __future__ import annotations

import asyncio

from faststream.kafka import KafkaBroker

from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.kafka import Outbox, subscribe_tracked
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore

DELIVERY_TOPICS = (Topic.PUBLICATION, Topic.RUNS)


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, store: ViewStore, notifier: Notifier) -> None:
    async def handle(batch: list[Inbound]) -> None:
        run_ids = await asyncio.to_thread(store.process, batch)
        notifier.notify(run_ids)

    subscribe_tracked(broker, settings, outbox, consumer="delivery", topics=DELIVERY_TOPICS, handle=handle)

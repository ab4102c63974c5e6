"""Kafka wiring of Delivery: publication and runs topics → the view store → live streams.

Every Delivery instance is a member of one consumer group. Each batch locks the run rows
it touches; the runs the store keeps in memory between polls are used only when the
locked row's version is the one they were written at, so a revoked partition needs no
eviction here. The instance that applied a batch wakes its
own feeds at once; the others hear the batch's ``NOTIFY`` (see ``notifier.py``)."""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.kafka import Outbox
from services.common.subscription import store_work, subscribe_tracked
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore

DELIVERY_TOPICS = (Topic.PUBLICATION, Topic.RUNS)
GATHER_MS = 15
"""How long Delivery's fetches gather records. A proposal reaches Delivery as its previews,
then a commit and a relay later (a few milliseconds) its publications: fetched as they
arrive, each became a poll of its own — a view transaction, a position and a wake-up
each — and at a paced load that fixed cost per poll was most of Delivery's CPU. Gathered,
one poll usually carries both, for at most this much more until the first frame."""


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, store: ViewStore, notifier: Notifier) -> None:
    async def handle(batch: list[Inbound]) -> None:
        feeds = await store_work(len(batch), settings.inline_poll_records, store.process, batch)
        notifier.notify(feeds)

    subscribe_tracked(broker, settings, outbox, consumer="delivery", topics=DELIVERY_TOPICS, handle=handle,
                      gather_ms=GATHER_MS)

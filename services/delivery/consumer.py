"""Kafka wiring of Delivery: publication and runs topics → the view store → live streams.

Every Delivery instance is a member of one consumer group. Each batch locks the run rows
it touches; the runs the store keeps in memory between polls are used only when the
locked row's version is the one they were written at, so a revoked partition needs no
eviction here. The instance that applied a batch hands its own feeds the frames it
committed at once; the others hear the batch's ``NOTIFY`` and read them from the store
(see ``notifier.py``)."""

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
"""How long Delivery's fetches gather records once it is busy (:data:`GATHER_FROM`): the
most a gathered record waits for the records after it. A busy Delivery takes its records
in fewer polls — a view transaction, a position and a wake-up each — for at most this much
more until their frames."""

GATHER_FROM = 4
"""The fewest records of a poll after which Delivery's next fetch gathers (:data:`GATHER_MS`).
Every record on this path is a frame a client waits for. At a paced load a poll brings a
proposal's previews or its publications (a pair: they are produced together): a window
there would be a fixed delay on every frame, not a batch, so such a poll's next fetch is a
long poll answered by the next record. A poll of more than one proposal's pair means
records arrive faster than polls turn: gathering them costs a window's delay and saves
polls. The price of not gathering a paced load is a poll for the previews and one for the
publications of each proposal, where a window would have taken both in one."""


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, store: ViewStore, notifier: Notifier) -> None:
    async def handle(batch: list[Inbound]) -> None:
        committed = await store_work(len(batch), settings.inline_poll_records, store.commit, batch)
        notifier.notify(committed.feeds, committed)

    subscribe_tracked(broker, settings, outbox, consumer="delivery", topics=DELIVERY_TOPICS, handle=handle,
                      gather_ms=GATHER_MS, gather_from=GATHER_FROM)

"""Kafka wiring of Publication: runtime, sources and control topics → the Publication log.

Previews are sent while the poll commits and awaited after it (P14: a preview may go out
before the commit, to cut first paint; P13's quota behind it is durable first)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any

from faststream.kafka import KafkaBroker

from imprint.contracts.topics import Topic
from services.common.inbound import Inbound
from services.common.kafka import Outbox, Outgoing, confirmed
from services.common.subscription import subscribe_tracked
from services.common.settings import Settings
from services.publication.application import PublicationLog

PUBLICATION_TOPICS = (Topic.RUNTIME, Topic.SOURCES, Topic.CONTROL)


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, app: PublicationLog) -> None:
    loop = asyncio.get_running_loop()
    handed: list[Future[list[asyncio.Future[Any]]]] = []
    """What this poll emitted, handed to the event loop in order: each hand-off resolves to
    its sends' acknowledgements, awaited once the poll's commit is done."""

    def emit(items: Sequence[Outgoing]) -> None:
        # Handed to the loop now, in order, and sent as soon as the loop takes it, usually
        # while the poll commits. The unit of work does not wait for the loop to take it
        # (that would be a round trip between the two threads between every poll's previews
        # and its commit), nor for the acknowledgements: the broker's round trip and the
        # database's overlap, and the poll waits for both. A preview confirmed after its
        # block's commit changes nothing a viewer sees (P16: for the same revision the
        # committed receipt beats the preview).
        handed.append(asyncio.run_coroutine_threadsafe(outbox.send_many(items), loop))

    async def acknowledged(handoff: Future[list[asyncio.Future[Any]]]) -> None:
        await confirmed(await asyncio.wrap_future(handoff))  # a refused hand-off fails like an acknowledgement

    def taken() -> list[Coroutine[Any, Any, None]]:
        pending = [acknowledged(handoff) for handoff in handed]
        handed.clear()
        return pending

    async def handle(batch: list[Inbound]) -> None:
        try:
            await asyncio.to_thread(app.process, batch, emit)
        except BaseException:
            await asyncio.gather(*taken(), return_exceptions=True)
            raise
        await asyncio.gather(*taken())  # a failure redelivers the poll; what it committed is skipped

    async def revoked(tracking_names: list[str]) -> None:
        await asyncio.to_thread(app.revoked, tracking_names)

    subscribe_tracked(broker, settings, outbox, consumer="publication", topics=PUBLICATION_TOPICS, handle=handle,
                      on_revoked=revoked)

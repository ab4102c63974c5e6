"""Kafka wiring of Publication: runtime, sources and control topics → the Publication log.

Previews go out before the poll's commit, or while it commits, and are confirmed after
it (P14: a preview may go out before the commit, to cut first paint; P13's quota behind
it is durable first). Where the poll runs is its size's to say, as for every consumer's
store work (``IMPRINT_INLINE_POLL_RECORDS``, :func:`services.common.subscription.store_work`):

* a small poll runs on the event loop, paused where its previews were emitted and its
  commit is next (:meth:`PublicationLog.steps`): the loop sends them, and the unit
  commits once they are on the wire. A paced load's one-proposal polls pay no trip to a
  worker thread, nor a hand-off of their previews back to the loop;
* a large poll runs in a worker thread, its previews handed to the loop and sent while
  the thread commits: a burst's polls overlap the loop's fetches and sends."""

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

Handed = Future[list[asyncio.Future[Any]]] | asyncio.Future[list[asyncio.Future[Any]]]
"""What a poll emitted, handed to the event loop: it resolves to its sends' acknowledgements."""


def subscribe(broker: KafkaBroker, settings: Settings, outbox: Outbox, app: PublicationLog) -> None:
    loop = asyncio.get_running_loop()
    handed: list[Handed] = []
    """What this poll emitted, in order; awaited once the poll's commit is done."""

    def emit_from_the_thread(items: Sequence[Outgoing]) -> None:
        # Handed to the loop now, in order, and sent as soon as the loop takes it, usually
        # while the poll commits. The unit of work does not wait for the loop to take it
        # (that would be a round trip between the two threads between every poll's previews
        # and its commit), nor for the acknowledgements: the broker's round trip and the
        # database's overlap, and the poll waits for both. A preview confirmed after its
        # block's commit changes nothing a viewer sees (P16: for the same revision the
        # committed receipt beats the preview).
        handed.append(asyncio.run_coroutine_threadsafe(outbox.send_many(items), loop))

    def emit_on_the_loop(items: Sequence[Outgoing]) -> None:
        handed.append(asyncio.ensure_future(outbox.send_many(items)))

    async def on_the_loop(batch: Sequence[Inbound]) -> None:
        """The poll's steps on the loop: at its pause the emitted sends reach the producer
        and the broker answers them, then the unit commits. The answer is the producer's one
        public sign that a send left (the consumer's producer does not linger, so the wait
        is one round trip, and the loop serves others meanwhile). Whether a send failed is
        still :func:`confirmed`'s to say, after the commit, as on a worker thread."""
        steps = app.steps(batch, emit_on_the_loop)
        try:
            await asyncio.sleep(0)  # as store_work: what the poll's taking woke goes first
            for _ in steps:
                sent = await asyncio.gather(*handed, return_exceptions=True)
                answers = [answer for futures in sent if isinstance(futures, list) for answer in futures]
                if answers:
                    await asyncio.wait(answers)
        finally:
            steps.close()  # cancelled at its pause: the unit ends uncommitted

    async def acknowledged(handoff: Handed) -> None:
        await confirmed(await asyncio.wrap_future(handoff))  # a refused hand-off fails like an acknowledgement

    def taken() -> list[Coroutine[Any, Any, None]]:
        pending = [acknowledged(handoff) for handoff in handed]
        handed.clear()
        return pending

    async def handle(batch: list[Inbound]) -> None:
        try:
            if len(batch) <= settings.inline_poll_records:
                await on_the_loop(batch)
            else:
                await asyncio.to_thread(app.process, batch, emit_from_the_thread)
        except BaseException:
            await asyncio.gather(*taken(), return_exceptions=True)
            raise
        await asyncio.gather(*taken())  # a failure redelivers the poll; what it committed is skipped

    async def revoked(tracking_names: list[str]) -> None:
        await asyncio.to_thread(app.revoked, tracking_names)

    subscribe_tracked(broker, settings, outbox, consumer="publication", topics=PUBLICATION_TOPICS, handle=handle,
                      on_revoked=revoked)

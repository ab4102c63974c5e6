"""``imprint serve publication``: runtime and sources topics → the Publication log, and (unless
``IMPRINT_PUBLICATION_RELAY=separate``) the relay of that log, handed its commits in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import Policy
from services.common.backends import backend_for
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.kafka import Outbox, confirmed, make_broker, subscribe_tracked
from services.common.lifecycle import run_until_stopped
from services.publication.application import RUN_OPENED, PublicationLog
from services.publication.sealing import REMOVED, SEAL_MARK, SEALED, UNREADABLE, BatchOpener, Decode

__all__ = ["REMOVED", "RUN_OPENED", "SEAL_MARK", "SEALED", "UNREADABLE", "BatchOpener", "Decode", "PublicationLog",
           "open_log", "serve"]
"""The Publication part as other parts and the operator tools see it: how its log is opened."""


def open_log(settings: Settings) -> PublicationLog:
    backend = backend_for(settings)
    policy = Policy(
        modifications_per_block=settings.block_modification_quota,
        modifications_per_run=settings.run_modification_quota,
        display_char_limit=settings.display_char_limit,
    )
    env = backend.environment(PublicationLog.name)
    keyring = backend.keyring()
    return backend.open(lambda: PublicationLog(keyring, env=env, policy=policy))


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    broker = make_broker(settings, "imprint-publication")
    outbox = Outbox(settings, "imprint-publication")
    loop = asyncio.get_running_loop()

    handed: list[Future[list[asyncio.Future[Any]]]] = []
    """What this poll emitted, handed to the event loop in order: each hand-off resolves to
    its sends' acknowledgements, awaited once the poll's commit is done."""

    def emit(items: Sequence[tuple[Topic, Message]]) -> None:
        # Handed to the loop now, in order, and sent as soon as the loop takes it, usually
        # while the poll commits (P14: a preview may go out before the commit, to cut first
        # paint; P13's quota behind a preview was made durable before it was emitted). The
        # unit of work does not wait for the loop to take it: a blocking hand-off was a
        # round trip between the two threads, GIL hand-overs included, between every
        # poll's previews and its commit. Nor do the acknowledgements hold the commit up:
        # the broker's round trip and the database's overlap, and the poll waits for both.
        # A preview confirmed after its block's commit changes nothing a viewer sees (P16:
        # for the same revision the committed receipt beats the preview).
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

    subscribe_tracked(broker, settings, outbox, consumer="publication",
                      topics=(Topic.RUNTIME, Topic.SOURCES, Topic.CONTROL), handle=handle, on_revoked=revoked)
    work = []
    relay = None
    if settings.publication_relay == "inline":
        from services.publication.relay import publication_relay

        relay = publication_relay(settings, app, inline=True)
        work.append(relay.run())
    await outbox.start()
    try:
        await run_until_stopped("publication", broker, *work)
    finally:
        if relay is not None:
            relay.stop()
        await outbox.stop()
        app.close()

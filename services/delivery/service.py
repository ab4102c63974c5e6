"""``imprint serve delivery``: the gateway — consumer, view store and HTTP on one loop.

Any number of instances may run behind any load balancer (no sticky sessions). With
PostgreSQL they share one view store: the instances form one consumer group, so each
fact is applied once (frame ids are assigned in the store, under the run's row lock),
and each batch ``NOTIFY``s the store's channel, which every instance ``LISTEN``s to, so a
client on any instance follows its run live and resumes on any other with
``Last-Event-ID``. The embedded SQLite store has one instance."""

from __future__ import annotations

import asyncio
import os
from types import FrameType

import uvicorn

from imprint.contracts.base import Message
from services.common import tracing
from services.common.backends import backend_for
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import settle_heap
from services.common.observability import get_logger
from services.common.settings import Settings
from services.delivery import consumer
from imprint.contracts.registry import topic_of
from services.delivery.app import create_app
from services.delivery.notifier import Notifier
from services.delivery.store_wakeups import StoreWakeups
from services.delivery.view_store import ViewStore

log = get_logger(__name__)

DATE_REFRESH_SECONDS = 1.0
"""How often the server refreshes its ``Date`` header (the only work its main loop does)."""


class Server(uvicorn.Server):
    """uvicorn's server, whose main loop wakes once a second for its ``Date`` header and at
    once when told to stop, instead of ten times a second to look whether it should."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        while not await self.on_tick(0):  # a tick of 0 refreshes the date header
            try:
                await asyncio.wait_for(self._wake.wait(), DATE_REFRESH_SECONDS)
            except TimeoutError:
                pass

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)


async def serve(settings: Settings) -> None:
    backend = backend_for(settings)
    tracer = tracing.active_tracer("imprint.delivery")  # None: tracing off
    store = backend.open(lambda: ViewStore(settings, tracer=tracer))
    # One member of the consumer group per instance, named so an operator (and the
    # multi-instance test) can tell which instance holds which partitions.
    broker = make_broker(settings, f"imprint-delivery-{os.getpid()}")
    outbox = Outbox(settings, f"imprint-delivery-{os.getpid()}", tracer=tracer)
    notifier = Notifier(poll_interval=settings.sse_poll_seconds, tracer=tracer,
                        inline_reads=settings.inline_poll_records)
    notifier.bind(asyncio.get_running_loop())
    consumer.subscribe(broker, settings, outbox, store, notifier)
    listener = backend.table_wakeups(store.tables)
    wakeups = None if listener is None else StoreWakeups(listener, store.origin, notifier)
    if wakeups is not None:
        wakeups.start(asyncio.get_running_loop())

    async def publish(message: Message) -> None:
        await outbox.publish(topic_of(message), message)

    started = asyncio.Event()
    app = create_app(settings, store, publish, notifier=notifier, caught_up=started.is_set,
                     poll_interval=settings.sse_poll_seconds)
    server = Server(uvicorn.Config(
        app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False,
        lifespan="off", timeout_graceful_shutdown=5,
        http="httptools",  # C parser and chunked writes: one SSE body per client per wake-up costs less

    ))
    await outbox.start()
    await broker.start()
    settle_heap()
    started.set()
    try:
        await server.serve()  # owns SIGINT/SIGTERM: stops accepting, then returns
    finally:
        if wakeups is not None:
            wakeups.stop()
        await notifier.close()
        await broker.stop()
        await outbox.stop()
        store.close()

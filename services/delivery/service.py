"""``imprint serve delivery``: the gateway — consumer, view store and HTTP on one loop."""

from __future__ import annotations

import asyncio

import uvicorn

from imprint.contracts.base import Message
from services.common.settings import Settings
from services.common.eventstore import ensure_schema, open_application
from services.common.kafka import Outbox, make_broker
from services.delivery import consumer
from services.delivery.app import create_app, topic_for
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore


async def serve(settings: Settings) -> None:
    ensure_schema(settings)
    store = open_application(settings, lambda: ViewStore(settings))
    broker = make_broker(settings, "imprint-delivery")
    outbox = Outbox(broker, settings)
    notifier = Notifier()
    notifier.bind(asyncio.get_running_loop())
    consumer.subscribe(broker, settings, outbox, store, notifier)

    async def publish(message: Message) -> None:
        await outbox.publish(topic_for(message), message)

    started = asyncio.Event()
    app = create_app(settings, store, publish, notifier=notifier, caught_up=started.is_set)
    server = uvicorn.Server(uvicorn.Config(
        app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False,
        lifespan="off", timeout_graceful_shutdown=5,
    ))
    await broker.start()
    started.set()
    try:
        await server.serve()  # owns SIGINT/SIGTERM: stops accepting, then returns
    finally:
        await broker.stop()
        store.close()

"""``imprint serve publication``: runtime and sources topics → the Publication log, and (unless
``IMPRINT_PUBLICATION_RELAY=separate``) the relay of that log, handed its commits in memory."""

from __future__ import annotations

from services.common import tracing
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.common.settings import Settings
from services.publication import consumer
from services.publication.application import open_log
from services.publication.relay import publication_relay


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    app.tracer = tracing.active_tracer("imprint.publication")  # None: tracing off
    broker = make_broker(settings, "imprint-publication")
    # No linger: a poll's sends reach the producer in one turn of the loop and leave
    # together anyway, and a small poll's commit waits for its previews' answer (P14).
    outbox = Outbox(settings, "imprint-publication", linger_ms=0, tracer=app.tracer)
    consumer.subscribe(broker, settings, outbox, app)
    work = []
    relay = None
    if settings.publication_relay == "inline":
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

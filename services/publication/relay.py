"""``imprint serve publication-relay`` (alias ``relay``): the committed Publication log →
``imprint.publication.v1``. Run two or more for failover: one is active, the others
stand by (``services.common.relay``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import announce
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.common.relay import relay_for
from services.common.settings import Settings
from services.publication.service import open_log

RELAY_NAME = "relay→imprint.publication.v1"


def announce_publication(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
    message = announce(domain_event)
    return [] if message is None else [(Topic.PUBLICATION, message)]


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    broker = make_broker(settings, "imprint-publication-relay")
    relay = relay_for(settings, app, announce_publication, Outbox(broker, settings), name=RELAY_NAME)
    try:
        await run_until_stopped("publication-relay", broker, relay.run())
    finally:
        relay.stop()
        app.close()

"""``imprint serve relay``: the committed Publication log → ``imprint.publication.v1``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import announce
from services.common.settings import Settings
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.publication.service import open_log
from services.relay.relay import Relay
from services.relay.wakeups import wakeups_for

RELAY_NAME = "relay→imprint.publication.v1"


def announce_publication(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
    message = announce(domain_event)
    return [] if message is None else [(Topic.PUBLICATION, message)]


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    broker = make_broker(settings, "imprint-relay")
    relay = Relay(app, announce_publication, Outbox(broker, settings), name=RELAY_NAME,
                  wakeups=wakeups_for(settings, app))
    try:
        await run_until_stopped("relay", broker, relay.run())
    finally:
        relay.stop()
        app.close()

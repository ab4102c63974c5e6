"""``imprint serve publication-relay`` (alias ``relay``): the committed Publication log →
``imprint.publication.v1``. Run two or more for failover: one is active, the others
stand by (``services.common.relay``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import announce
from imprint.publication.announcements import ANNOUNCED_TOPICS
from services.common.lifecycle import run_until_stopped
from services.common.relay import relay_for
from services.common.settings import Settings
from services.publication.sealing import BatchOpener
from services.publication.service import open_log

RELAY_NAME = "relay→imprint.publication.v1"


def announce_publication(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
    message = announce(domain_event)
    return [] if message is None else [(Topic.PUBLICATION, message)]


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    relay = relay_for(settings, app, announce_publication, name=RELAY_NAME,
                      decode=BatchOpener(app.mapper, app.keyring),  # a fresh key read per batch
                      topics=ANNOUNCED_TOPICS)
    try:
        await run_until_stopped("publication-relay", None, relay.run())
    finally:
        relay.stop()
        app.close()

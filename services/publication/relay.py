"""The committed Publication log → ``imprint.publication.v1``.

By default each ``imprint serve publication`` runs this relay beside its consumer, handed
its own commits in memory (``IMPRINT_PUBLICATION_RELAY=inline``, see
:func:`publication_relay`). ``imprint serve publication-relay`` (alias ``relay``) runs it
on its own, reading every commit back from the log. Any number of either campaign for
the same lock: one is active, the others stand by (``services.common.relay``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import announce
from imprint.publication.announcements import ANNOUNCED_TOPICS
from services.common.lifecycle import run_relay_until_stopped
from services.common.handoff import HANDOFF_SHARE, Handoff
from services.common.relay import Relay, relay_for
from services.common.settings import Settings
from services.publication.application import PublicationLog, open_log
from services.publication.sealing import BatchOpener

RELAY_NAME = "relay→imprint.publication.v1"


def announce_publication(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
    message = announce(domain_event)
    return [] if message is None else [(Topic.PUBLICATION, message)]


def publication_relay(settings: Settings, app: PublicationLog, *, inline: bool) -> Relay:
    """The relay of ``app``'s log. ``inline``: it runs in the process that writes the log,
    and ``app`` hands it every commit (``PublicationLog.handoff``), with the commit's trace
    when ``app`` traces (a relay on its own reads the log back: no trace is stored there)."""
    handoff = Handoff(announce_publication, ANNOUNCED_TOPICS,
                      max_bytes=settings.hot_state_bytes // HANDOFF_SHARE) if inline else None
    app.handoff = handoff
    return relay_for(settings, app, announce_publication, name=RELAY_NAME,
                     to_events=BatchOpener(app.mapper, app.keyring),  # a fresh key read per batch
                     topics=ANNOUNCED_TOPICS, handoff=handoff, tracer=app.tracer if inline else None)


async def serve(settings: Settings) -> None:
    app = open_log(settings)
    await run_relay_until_stopped("publication-relay", publication_relay(settings, app, inline=False), app)

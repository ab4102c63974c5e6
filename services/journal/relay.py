"""The Journal log's relay: committed journal events → ``imprint.runs.v1``.

``imprint serve journal`` runs one beside its consumer, handed that process's commits in
memory (:class:`~services.common.relay.Handoff`, as Publication's relay is);
``imprint serve journal-relay`` runs one on its own, which reads every commit back. Any
number may run: one is active, the others stand by (``services.common.relay``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import Notification

from imprint.contracts.base import Message
from imprint.contracts.registry import topic_of
from imprint.contracts.topics import Topic
from imprint.journal.announcements import ANNOUNCED_TOPICS, announce
from imprint.shredding import FieldSealer, ScopedKeyring
from services.common.lifecycle import run_relay_until_stopped
from services.common.handoff import HANDOFF_SHARE, Handoff
from services.common.relay import Relay, relay_for
from services.common.settings import Settings
from services.journal.application import RuntimeJournal, open_journal

RELAY_NAME = "relay→imprint.runs.v1"


class BatchAnnouncer:
    """The relay's announcer: private fields of ``run.closed``/``run.progress`` are opened with
    the journal's keyring at announce time, with keys fetched once per conversation per batch (``ScopedKeyring``, renewed by
    :meth:`to_events` for every batch; a missing or destroyed key is never cached), not once
    per field."""

    def __init__(self, journal: RuntimeJournal) -> None:
        self._journal = journal
        self._sealer = journal.sealer

    def to_events(self, notifications: Sequence[Notification]) -> list[Any]:
        inner = self._journal.sealer
        self._sealer = FieldSealer(ScopedKeyring(inner.keyring), purpose=inner.purpose, remember_ciphers=True)
        to_domain_event = self._journal.mapper.to_domain_event
        return [to_domain_event(n) for n in notifications]

    def __call__(self, domain_event: Any) -> Sequence[tuple[Topic, Message]]:
        message = announce(domain_event, self._sealer)
        return [] if message is None else [(topic_of(message), message)]

    def handed(self, domain_event: Any) -> Sequence[tuple[Topic, Message]]:
        """What an event this process just committed announces (the hand-off, in the writing
        thread): its private fields opened under keys read for this event alone, as a batch
        read back would read them."""
        inner = self._journal.sealer
        message = announce(domain_event, FieldSealer(ScopedKeyring(inner.keyring), purpose=inner.purpose))
        return [] if message is None else [(topic_of(message), message)]


def journal_relay(settings: Settings, journal: RuntimeJournal, *, inline: bool) -> Relay:
    """The relay of ``journal``'s log. ``inline``: it runs in the process that writes the log,
    and ``journal`` hands it every commit (``RuntimeJournal.handoff``)."""
    batch = BatchAnnouncer(journal)
    handoff = Handoff(batch.handed, ANNOUNCED_TOPICS,
                      max_bytes=settings.hot_state_bytes // HANDOFF_SHARE) if inline else None
    journal.handoff = handoff
    return relay_for(settings, journal, batch, name=RELAY_NAME, to_events=batch.to_events, topics=ANNOUNCED_TOPICS,
                     handoff=handoff)


async def serve(settings: Settings) -> None:
    journal = open_journal(settings)
    await run_relay_until_stopped("journal-relay", journal_relay(settings, journal, inline=False), journal)

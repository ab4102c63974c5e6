"""The Journal log's relay: committed journal events → ``imprint.runs.v1``.

``imprint serve journal`` runs one beside its consumer; ``imprint serve journal-relay``
runs one on its own. Any number may run: one is active, the others stand by
(``services.common.relay``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from services.common.eventstore import ensure_schema
from services.common.lifecycle import run_until_stopped
from services.common.relay import Relay, relay_for
from services.common.settings import Settings
from services.journal.announcements import announce
from services.journal.application import RuntimeJournal, open_journal

RELAY_NAME = "relay→imprint.runs.v1"


def announcer(journal: RuntimeJournal) -> Callable[[Any], Sequence[tuple[Topic, Message]]]:
    """Private fields of ``run.closed``/``run.progress`` are opened with the journal's keyring at announce time."""

    def announce_runs(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
        message = announce(domain_event, journal.sealer)
        return [] if message is None else [(Topic.RUNS, message)]

    return announce_runs


def journal_relay(settings: Settings, journal: RuntimeJournal) -> Relay:
    return relay_for(settings, journal, announcer(journal), name=RELAY_NAME)


async def serve(settings: Settings) -> None:
    ensure_schema(settings)
    journal = open_journal(settings)
    relay = journal_relay(settings, journal)
    try:
        await run_until_stopped("journal-relay", None, relay.run())
    finally:
        relay.stop()
        journal.close()

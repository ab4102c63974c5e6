"""``imprint serve journal``: the Runtime journal consumer and its relay to ``imprint.runs.v1``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.eventstore import ensure_schema
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.journal import consumer
from services.journal.announcements import announce
from services.journal.application import RuntimeJournal, open_journal
from services.journal.retention import sweep_forever
from services.relay.relay import Relay
from services.relay.wakeups import wakeups_for

RELAY_NAME = "relay→imprint.runs.v1"


def announcer(journal: RuntimeJournal) -> Callable[[Any], Sequence[tuple[Topic, Message]]]:
    """Private fields of ``run.closed``/``run.progress`` are opened with the journal's keyring at announce time."""

    def announce_runs(domain_event: Any) -> Sequence[tuple[Topic, Message]]:
        message = announce(domain_event, journal.sealer)
        return [] if message is None else [(Topic.RUNS, message)]

    return announce_runs


async def serve(settings: Settings) -> None:
    ensure_schema(settings)
    journal = open_journal(settings)
    broker = make_broker(settings, "imprint-journal")
    outbox = Outbox(broker, settings)
    consumer.subscribe(broker, settings, outbox, journal)
    relay = Relay(journal, announcer(journal), outbox, name=RELAY_NAME, wakeups=wakeups_for(settings, journal))
    try:
        await run_until_stopped("journal", broker, relay.run(), sweep_forever(journal, outbox, settings))
    finally:
        relay.stop()
        journal.close()

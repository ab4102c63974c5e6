"""``imprint serve journal``: the Runtime journal consumer and its relay to ``imprint.runs.v1``
(``services.journal.relay``; elected, so several journal processes run one active relay)."""

from __future__ import annotations

from services.common.settings import Settings
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.journal import consumer
from services.journal.application import open_journal
from services.journal.relay import journal_relay
from services.journal.retention import sweep_forever


async def serve(settings: Settings) -> None:
    journal = open_journal(settings)
    broker = make_broker(settings, "imprint-journal")
    outbox = Outbox(settings, "imprint-journal")
    consumer.subscribe(broker, settings, outbox, journal)
    relay = journal_relay(settings, journal)
    await outbox.start()
    try:
        await run_until_stopped("journal", broker, relay.run(), sweep_forever(journal, outbox, settings))
    finally:
        relay.stop()
        await outbox.stop()
        journal.close()

"""``imprint serve journal``: the Runtime journal consumer and its relay to ``imprint.runs.v1``
(``services.journal.relay``; elected, so several journal processes run one active relay),
its retention sweeper (X8) and its lease sweeper (X10)."""

from __future__ import annotations

from services.common import tracing
from services.common.settings import Settings
from services.common.kafka import Outbox, make_broker
from services.common.lifecycle import run_until_stopped
from services.journal import consumer, leases, retention
from services.journal.application import open_journal
from services.journal.relay import journal_relay


async def serve(settings: Settings) -> None:
    journal = open_journal(settings)
    journal.tracer = tracing.active_tracer("imprint.journal")  # None: tracing off
    broker = make_broker(settings, "imprint-journal")
    outbox = Outbox(settings, "imprint-journal")
    consumer.subscribe(broker, settings, outbox, journal)
    relay = journal_relay(settings, journal, inline=True)
    await outbox.start()
    try:
        await run_until_stopped("journal", broker, relay.run(),
                               retention.sweep_forever(journal, outbox, settings),
                               leases.sweep_forever(journal, settings))
    finally:
        relay.stop()
        await outbox.stop()
        journal.close()

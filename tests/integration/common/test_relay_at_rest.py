"""A relay with nothing to relay, on each store backend, as ``imprint serve journal`` runs it
(inline: handed its writer's commits). It reads its log when it is told the log grew — a
commit handed to it, a NOTIFY of another writer — and otherwise only as a safety net that
does not tick every second (PostgreSQL, after ``NOTIFIED_CHECK_SECONDS``; SQLite, polling for
other writers at a pace that slows to ``HANDED_CHECK_SECONDS`` while nothing is found). A
commit after the quiet spell is relayed without waiting for that net. Counted, not timed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from services.common import relay as relay_module
from services.common.backends import backend_for
from services.common.settings import Settings
from services.journal.application import RuntimeJournal
from services.journal.relay import journal_relay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "component" / "journal"))
from journal_helpers import Feeder, to_running  # noqa: E402

pytestmark = pytest.mark.integration

WINDOW_SECONDS = 3.0


def most_quiet_reads(notified: bool, idle: float, window: float) -> int:
    """The log reads a quiet relay may make in ``window`` seconds (and one for the window's edge)."""
    if notified:
        return int(window // relay_module.NOTIFIED_CHECK_SECONDS) + 1
    reads, waited, wait = 0, 0.0, idle
    while waited < window:
        waited += wait
        reads += 1
        wait = min(wait * 2, relay_module.HANDED_CHECK_SECONDS)
    return reads + 1


async def until(condition, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


def test_a_quiet_relay_reads_its_log_only_when_told_and_relays_the_next_commit_at_once(isolated: Settings) -> None:
    journal = RuntimeJournal.from_settings(isolated)
    relay = journal_relay(isolated, journal, inline=True)
    notified = backend_for(isolated).log_wakeups(journal.recorder) is not None
    reads: list[int] = []
    select = journal.recorder.select_notifications

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(1)
        return select(*args, **kwargs)

    journal.recorder.select_notifications = counted  # type: ignore[method-assign]
    feed = Feeder(journal)

    async def scenario() -> int:
        running = asyncio.create_task(relay.run())
        try:
            await until(lambda: relay.active, "the relay elected")
            await asyncio.to_thread(feed, *to_running("run-before"))
            head = journal.recorder.max_notification_id() or 0
            await until(lambda: relay.position >= head, "the first commits relayed")
            await asyncio.sleep(relay_module.RECORD_SECONDS * 2)  # its position recorded: nothing owed
            before = len(reads)
            await asyncio.sleep(WINDOW_SECONDS)  # the window counted: nothing is committed in it
            quiet = len(reads) - before
            await asyncio.to_thread(feed, *to_running("run-after", message_id="m-after"))
            head = journal.recorder.max_notification_id() or 0
            await until(lambda: relay.position >= head, "the commit after the quiet spell relayed",
                        timeout=relay_module.NOTIFIED_CHECK_SECONDS / 2)
            return quiet
        finally:
            relay.stop()
            await asyncio.gather(running, return_exceptions=True)

    try:
        quiet = asyncio.run(scenario())
    finally:
        journal.close()
    most = most_quiet_reads(notified, 0.05, WINDOW_SECONDS)
    assert quiet <= most, f"{quiet} log reads in {WINDOW_SECONDS} s of quiet (at most {most})"


@pytest.mark.backends("postgres", reason="NOTIFY channels: one namespace per PostgreSQL database")
def test_deployments_sharing_a_database_notify_on_channels_of_their_own(isolated: Settings) -> None:
    """Each schema's log notifies a channel of its own: a relay is not woken to read its log by
    every commit of every other deployment (or test) in the same database."""
    other = isolated.model_copy(update={"database_schema": f"{isolated.database_schema}_other"})
    backend_for(other).prepare()
    first, second = RuntimeJournal.from_settings(isolated), RuntimeJournal.from_settings(other)
    try:
        channels = {first.recorder.channel_name, second.recorder.channel_name}
        assert len(channels) == 2 and all(len(channel) <= 63 for channel in channels), channels
    finally:
        first.close()
        second.close()
        from tests.support.postgres import drop_schema

        drop_schema(other)

"""A relay's wake-ups on PostgreSQL: every commit to the log NOTIFYs the log's channel
with its committer's mark. The listening thread hands the event loop every commit it
does not already know of — another process's, and any commit while this process's own
hand-off is closed — and drops this process's own while its relay is handed them in
memory, so nothing committed elsewhere goes unread and the loop is not woken for what it
has. While this process's own relay leads and is handed its commits, they send no
NOTIFY at all, and a relay whose hand-off closes notifies the channel once."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg import sql

from services.common.recorders import COMMITTER
from services.common.relay import STOOD_DOWN
from services.publication.relay import publication_relay
from services.common.settings import Settings
from services.common.backends import backend_for
from services.publication.application import open_log
from services.common.inbound import Inbound
from imprint.contracts.topics import Topic
from tests.integration.publication.pubsupport import admitted

pytestmark = [pytest.mark.integration,
              pytest.mark.backends("postgres", reason="the log's NOTIFY channel")]


async def _heard_while(settings: Settings, known: bool, commit: object) -> list[str | None]:
    log = open_log(settings)
    wakeups = backend_for(settings).log_wakeups(log.recorder)
    assert wakeups is not None, "a log in PostgreSQL is listened to"
    heard: list[str | None] = []
    try:
        wakeups.start(asyncio.get_running_loop(), heard.append,
                      lambda committer: known and committer == COMMITTER)
        deadline = time.monotonic() + 10
        while None not in heard:  # listening (a (re)connect is heard as None)
            assert time.monotonic() < deadline, "the listener never connected"
            await asyncio.sleep(0.02)
        heard.clear()
        await asyncio.to_thread(commit, log)  # type: ignore[arg-type]
        with log.recorder.datastore.get_connection() as connection:  # type: ignore[attr-defined]
            connection.execute(sql.SQL("NOTIFY {}, 'another-process'").format(
                sql.Identifier(log.recorder.channel_name)))  # type: ignore[attr-defined]
            connection.commit()
        while "another-process" not in heard:
            assert time.monotonic() < deadline, f"another process's commit was not heard: {heard}"
            await asyncio.sleep(0.02)
        return heard
    finally:
        wakeups.stop()
        log.close()


@pytest.mark.rule("P14")
@pytest.mark.parametrize("known", [True, False])
def test_own_commits_known_to_the_hand_off_are_dropped_before_the_loop_others_always_reach_it(
        isolated: Settings, known: bool) -> None:
    def commit(log: object) -> None:  # one commit of this process's writer
        log.process([Inbound(str(Topic.RUNTIME), 0, 0, admitted("run-w"), size=100)],  # type: ignore[attr-defined]
                    lambda items: None)

    heard = asyncio.run(_heard_while(isolated, known, commit))
    assert "another-process" in heard
    if known:
        assert COMMITTER not in heard, "this process's own commit woke the loop although it was handed off"
    else:
        assert COMMITTER in heard, "a commit not handed off must wake the relay"


@pytest.mark.rule("P14")
def test_own_commits_send_no_notify_while_the_relay_is_handed_them_and_a_closing_hand_off_notifies_once(
        isolated: Settings) -> None:
    """The listener hears every payload here (nothing is ``known``): what it does not hear
    was never sent. NOTIFYs arrive in commit order, so once a later marker is heard, an
    earlier commit's NOTIFY would have been heard too."""
    async def scenario() -> tuple[list[str | None], list[str | None], list[str | None]]:
        log = open_log(isolated)
        relay = publication_relay(isolated, log, inline=True)  # wires the recorder to the hand-off
        handoff = log.handoff
        assert handoff is not None
        wakeups = backend_for(isolated).log_wakeups(log.recorder)
        assert wakeups is not None
        heard: list[str | None] = []

        async def heard_up_to(marker: str) -> list[str | None]:
            await asyncio.to_thread(wakeups.wake_all, marker)
            deadline = time.monotonic() + 10
            while marker not in heard:
                assert time.monotonic() < deadline, f"{marker} was not heard: {heard}"
                await asyncio.sleep(0.02)
            taken = list(heard)
            heard.clear()
            return taken

        def commit(offset: int) -> None:  # one commit of this process's writer
            log.process([Inbound(str(Topic.RUNTIME), 0, offset, admitted(f"run-q{offset}"), size=100)],
                        lambda items: None)

        try:
            wakeups.start(asyncio.get_running_loop(), heard.append)
            deadline = time.monotonic() + 10
            while None not in heard:  # listening (a (re)connect is heard as None)
                assert time.monotonic() < deadline, "the listener never connected"
                await asyncio.sleep(0.02)
            heard.clear()
            handoff.open(lambda: None)  # the relay leads
            await asyncio.to_thread(commit, 0)
            while_handed = await heard_up_to("after-the-handed-commit")
            handoff.close()  # the relay stands down: it notifies once
            await relay._stood_down()
            standing_down = await heard_up_to("after-standing-down")
            await asyncio.to_thread(commit, 1)
            after = await heard_up_to("after-the-unhanded-commit")
            return while_handed, standing_down, after
        finally:
            wakeups.stop()
            log.close()

    while_handed, standing_down, after = asyncio.run(scenario())
    assert COMMITTER not in while_handed, "a commit handed to this process's relay still sent its NOTIFY"
    assert STOOD_DOWN in standing_down, "a relay whose hand-off closed did not notify the log's channel"
    assert COMMITTER in after, "a commit while no hand-off is open must NOTIFY (a standby or another leader reads it)"

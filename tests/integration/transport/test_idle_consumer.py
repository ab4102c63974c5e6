"""A tracked consumer at rest (no record arriving) and the first record after a quiet spell.

A quiet consumer's fetch carries every partition and the broker holds it for
``LONG_POLL_MS`` (Kafka's ``fetch.max.wait.ms``) unless a record arrives: it sends about one
fetch per long poll, not one per busy bound, and a record arriving meanwhile answers the
fetch in flight at once. Counted on the consumer's fetcher (``Polls``), not timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from imprint.contracts.runtime import RunQueued
from imprint.contracts.topics import Topic
from services.common.inbound import Inbound
from services.common.kafka import Outbox, make_broker
from services.common.subscription import FETCH_WAIT_MS, LONG_POLL_MS, Polls, subscribe_tracked
from services.common.settings import Settings
from tests.support.kafka import produce

pytestmark = pytest.mark.integration

WINDOW_SECONDS = 3.0


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize("gather_ms", [0, 50])
def test_a_quiet_consumer_sends_a_fetch_per_long_poll(isolated: Settings, gather_ms: int) -> None:
    s = isolated

    async def scenario() -> tuple[int, int]:
        handled = asyncio.Event()

        async def handle(inbound: list[Inbound]) -> None:
            handled.set()

        broker = make_broker(s, "idle-test")
        outbox = Outbox(s, "idle-test")
        polls: Polls = subscribe_tracked(broker, s, outbox, consumer=f"idle-{gather_ms}", topics=[Topic.RUNTIME],
                                         handle=handle, gather_ms=gather_ms)
        await outbox.start()
        await broker.start()
        try:
            await produce(s, Topic.RUNTIME, RunQueued(run_id="run-idle"))
            await asyncio.wait_for(handled.wait(), timeout=30)  # joined, assigned, polled
            await until(lambda: polls.long_polling, "a long poll once quiet")
            fetches, long_polls = polls.fetches, polls.long_polls
            await asyncio.sleep(WINDOW_SECONDS)  # the window counted: nothing arrives in it
            return polls.fetches - fetches, polls.long_polls - long_polls
        finally:
            await broker.stop()
            await outbox.stop()

    fetches, long_polls = asyncio.run(scenario())
    most = WINDOW_SECONDS * 1000 / LONG_POLL_MS + 1
    assert 1 <= fetches <= most, (
        f"{fetches} fetches in {WINDOW_SECONDS} s at rest: one per long poll ({LONG_POLL_MS} ms), not one per "
        f"{gather_ms or FETCH_WAIT_MS} ms")
    assert long_polls == fetches, "every fetch of a quiet consumer is a long poll"


@pytest.mark.parametrize("gather_ms", [0, 50])
def test_a_record_arriving_during_a_long_poll_is_handed_over_by_it(isolated: Settings, gather_ms: int) -> None:
    s = isolated
    long_poll_ms = 120_000  # the broker would hold the fetch longer than the test waits

    async def scenario() -> tuple[int, int]:
        handled: list[int] = []
        arrived = asyncio.Event()

        async def handle(inbound: list[Inbound]) -> None:
            handled.append(polls.fetches)
            arrived.set()

        broker = make_broker(s, "long-poll-test")
        outbox = Outbox(s, "long-poll-test")
        polls = subscribe_tracked(broker, s, outbox, consumer=f"long-poll-{gather_ms}", topics=[Topic.RUNTIME],
                                  handle=handle, gather_ms=gather_ms, long_poll_ms=long_poll_ms)
        await outbox.start()
        await broker.start()
        try:
            await produce(s, Topic.RUNTIME, RunQueued(run_id="run-first"))
            await asyncio.wait_for(arrived.wait(), timeout=30)
            arrived.clear()
            await until(lambda: polls.long_polling, "a long poll in flight")
            in_flight = polls.fetches
            await produce(s, Topic.RUNTIME, RunQueued(run_id="run-second"))
            await asyncio.wait_for(arrived.wait(), timeout=60)  # well within the long poll
            return in_flight, handled[-1]
        finally:
            await broker.stop()
            await outbox.stop()

    in_flight, at_handling = asyncio.run(scenario())
    assert at_handling <= in_flight + 1, (
        "the record came in the fetch that was in flight (at most the next one, sent once it was drained, "
        f"was counted before the handler ran): {at_handling - in_flight} fetches later")

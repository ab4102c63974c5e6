"""How a tracked consumer's next fetch waits (``Polls``), decided from the polls before it,
on a stand-in for aiokafka's fetcher (the real broker: tests/integration/transport): a
gathering consumer gathers only while its polls are large, long-polls after a small poll
or a window answered empty, and keeps the busy bounds while fetched records wait."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from services.common.subscription import FETCH_WAIT_MS, GATHER_BYTES, LONG_POLL_MS, Polls

LONG = (LONG_POLL_MS, 1)
GATHER = (15, GATHER_BYTES)


class Fetcher:
    """What ``Polls`` touches of aiokafka's fetcher: the bounds it sets, its records waiting."""

    def __init__(self) -> None:
        self._records: dict[str, Any] = {}
        self._fetch_max_wait_ms = 0
        self._fetch_min_bytes = 0
        self.sent: list[tuple[int, int]] = []

    def _get_actions_per_node(self, assignment: Any) -> tuple[list[Any], dict[Any, Any], int, bool, list[Any]]:
        self.sent.append((self._fetch_max_wait_ms, self._fetch_min_bytes))
        return [("node", "request")], {}, 0, False, []


class Consumer:
    def __init__(self) -> None:
        self._fetcher = Fetcher()
        self.coming: deque[int] = deque()

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[str, list[int]]:
        return {"topic#0": list(range(self.coming.popleft()))}


def consumer_of(polls: Polls) -> Consumer:
    """A consumer whose fetches ``polls`` plans (as its first poll makes it, before it waits)."""
    consumer = Consumer()
    polls._plan_fetches(consumer)
    return consumer


def fetch_after(polls: Polls, consumer: Consumer, records: int | None = None) -> tuple[int, int]:
    """The bounds of the fetch sent after a poll of ``records`` (``None``: no poll since the
    last fetch, which came back empty)."""
    if records is not None:
        consumer.coming.append(records)
        asyncio.run(polls.get_msg(consumer))
    consumer._fetcher._get_actions_per_node(None)
    return consumer._fetcher.sent[-1]


def test_a_gathering_consumer_gathers_only_after_a_large_poll() -> None:
    polls = Polls(500, gather_ms=15, gather_from=8)
    consumer = consumer_of(polls)
    assert fetch_after(polls, consumer, 2) == LONG, "a paced poll's next record is not held for a window"
    assert fetch_after(polls, consumer, 10) == GATHER, "a busy consumer gathers"
    assert fetch_after(polls, consumer, 8) == GATHER
    assert fetch_after(polls, consumer) == LONG, "a window answered empty ends the gathering"
    assert fetch_after(polls, consumer, 3) == LONG
    assert (polls.fetches, polls.gathered, polls.long_polls) == (5, 2, 3)


def test_records_waiting_keep_the_busy_bounds() -> None:
    gathering, plain = Polls(500, gather_ms=15, gather_from=8), Polls(500)
    for polls, busy in ((gathering, GATHER), (plain, (FETCH_WAIT_MS, 1))):
        consumer = consumer_of(polls)
        assert fetch_after(polls, consumer, 1) == LONG
        consumer._fetcher._records["topic#1"] = object()
        assert fetch_after(polls, consumer) == busy, "some partitions are left out of this fetch"
        assert not polls.long_polling
        del consumer._fetcher._records["topic#1"]
        assert fetch_after(polls, consumer, 20) == (GATHER if polls is gathering else LONG)


def test_a_consumer_nobody_waits_on_gathers_after_any_poll() -> None:
    polls = Polls(500, gather_ms=15)
    consumer = consumer_of(polls)
    assert fetch_after(polls, consumer) == LONG, "nothing polled yet"
    assert fetch_after(polls, consumer, 1) == GATHER
    assert fetch_after(polls, consumer) == LONG

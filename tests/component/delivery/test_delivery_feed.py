"""The live-feed hub without a database: a fake store stands in for ``read_feeds``/``heads``
(the real store and HTTP are in tests/integration/delivery/test_delivery_live_feed.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from imprint.delivery.frame import as_json
from imprint.delivery.frames import Frame
from services.delivery.notifier import Notifier
from services.delivery.sse import frame_event, read_back
from services.delivery.store_wakeups import StoreWakeups
from services.delivery.view_store import FeedRead

RUN = "run-feed"


class FakeStore:
    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.reads = 0
        self.runs_read: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()

    def add(self, count: int, run_id: str = RUN) -> None:
        for _ in range(count):
            n = sum(1 for f in self.frames if f.run_id == run_id) + 1
            self.frames.append(read_back(run_id, n, "progress", as_json({"stage": f"s{n}"}), f"h{n}"))

    def read_feeds(self, cursors: dict[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        self.reads += 1
        self.runs_read.append(sorted(cursors))
        self.reading.set()
        self.gate.wait(10)
        return {run_id: FeedRead([f for f in self.frames if f.run_id == run_id and f.id > last_id][:limit],
                                 exists=True, deleted=False, terminal=False, last_frame_id=len(self.frames))
                for run_id, last_id in cursors.items()}

    def heads(self, run_ids: list[str]) -> dict[str, tuple[int, bool]]:
        return {r: (len(self.frames), False) for r in run_ids}


async def settle(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


@asynccontextmanager
async def one_client(poll_interval: float = 60) -> AsyncIterator[tuple[FakeStore, Notifier, Any]]:
    """A hub with one client of ``RUN`` whose first read is done; closed afterwards."""
    store, hub = FakeStore(), Notifier(poll_interval=poll_interval)
    subscription = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
    await settle(lambda: store.reads == 1, "the first read")
    try:
        yield store, hub, subscription
    finally:
        subscription.close()
        await hub.close()


@pytest.mark.rule("D1")
async def test_clients_of_a_run_share_each_read_and_each_encoding() -> None:
    store, hub = FakeStore(), Notifier(poll_interval=60)
    first = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
    second = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
    await settle(lambda: store.reads == 1, "the first read")
    store.add(3)
    hub.notify([RUN])
    a, b = await first.next(), await second.next()
    assert [f.id for f in a] == [1, 2, 3] and a == b
    assert all(x is y and x.sse for x, y in zip(a, b, strict=True)), "one object per frame, its SSE event made once"
    assert a[0].sse == frame_event(Frame(RUN, 1, "progress", {"stage": "s1"}, "h1"))
    assert store.reads == 2, "one read for both clients"
    first.close()
    second.close()
    assert RUN not in hub.feeds, "the feed ends with its last client"
    await hub.close()


@pytest.mark.rule("D1")
async def test_one_batch_that_touched_many_followed_runs_costs_one_read_for_all_of_them() -> None:
    store, hub = FakeStore(), Notifier(poll_interval=60)
    runs = [f"run-{n:02d}" for n in range(50)]
    clients = {run: hub.subscribe(run, store, 0) for run in runs}  # type: ignore[arg-type]
    await settle(lambda: store.reads >= 1 and not hub._due, "the first reads")
    before = store.reads
    for run in runs:
        store.add(2, run_id=run)
    hub.notify(runs)  # what one Delivery batch over fifty runs announces
    for run, client in clients.items():
        frames = await asyncio.wait_for(client.next(), 10)
        assert [(f.run_id, f.id) for f in frames] == [(run, 1), (run, 2)]
    assert store.reads == before + 1, "one store read for the fifty woken runs, not one per run"
    assert store.runs_read[-1] == runs
    for client in clients.values():
        client.close()
    await hub.close()


@pytest.mark.rule("D1")
async def test_wake_ups_during_a_read_coalesce_into_one_more_read() -> None:
    async with one_client() as (store, hub, subscription):
        store.gate.clear()
        store.reading.clear()
        hub.notify([RUN])
        await asyncio.to_thread(store.reading.wait, 10)  # the second read is in flight, held
        for n in range(10):
            store.add(1)
            hub.notify([RUN])
        store.gate.set()
        frames: list[Frame] = []
        while len(frames) < 10:
            frames += await subscription.next()
        await asyncio.sleep(0.05)
        assert [f.id for f in frames] == list(range(1, 11))
        assert store.reads == 3, "ten wake-ups during a read cost one more read"


@pytest.mark.rule("D1")
async def test_a_late_client_learns_what_the_feed_read_before_it_and_an_overflow_is_flagged() -> None:
    store, hub = FakeStore(), Notifier(poll_interval=60, buffer_limit=4)
    early = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
    store.add(2)
    hub.notify([RUN])
    assert [f.id for f in await early.next()] == [1, 2]
    late = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
    assert late.floor == 2, "frames 1-2 were read before it joined: it reads them from the store"
    store.add(6)
    hub.notify([RUN])
    await settle(lambda: early.lagged, "the overflow")
    assert early.lagged and not early.frames, "six frames do not fit in four: dropped here, read from the store"
    assert await early.next() == []
    early.close()
    late.close()
    await hub.close()


@pytest.mark.rule("D1")
async def test_a_lost_wake_up_is_caught_by_one_fallback_check_for_all_runs() -> None:
    async with one_client(poll_interval=0.05) as (store, _, subscription):
        store.add(1)  # committed, never announced
        assert [f.id for f in await asyncio.wait_for(subscription.next(), 10)] == [1]


@pytest.mark.rule("D1")
async def test_notifications_wake_the_feeds_of_other_instances_only() -> None:
    async with one_client() as (store, hub, subscription):
        wakeups = StoreWakeups(None, "me", hub)  # type: ignore[arg-type] # what it hears, without a listener
        store.add(1)
        assert wakeups.own('{"origin": "me", "runs": ["run-feed"]}'), "dropped in the listening thread"
        wakeups.heard('{"origin": "me", "runs": ["run-feed"]}')
        wakeups.heard("not json")
        await asyncio.sleep(0.05)
        assert store.reads == 1, "this process's own batch already woke its feeds"
        assert not wakeups.own('{"origin": "another", "runs": ["run-feed", "run-elsewhere"]}')
        wakeups.heard('{"origin": "another", "runs": ["run-feed", "run-elsewhere"]}')
        assert [f.id for f in await asyncio.wait_for(subscription.next(), 10)] == [1]

"""The live-feed hub without a database: a fake store stands in for ``read_feeds``/``heads``
and for what a poll of this process commits and hands over (the real store and HTTP are in
tests/integration/delivery/test_delivery_live_feed.py and test_delivery_handoff.py)."""

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
from services.delivery.view_sink import Committed
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

    def commit(self, count: int, run_id: str = RUN) -> Committed:
        """``count`` frames committed by a poll of this process: stored, and handed over as
        the poll wrote them (its frame rows)."""
        before = len(self.frames)
        self.add(count, run_id)
        return Committed([run_id], {run_id: [[f.run_id, f.id, f.event, f.text, f.body_sha256, None, 0, ""]
                                             for f in self.frames[before:]]})

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


def handed(frames: list[Frame], run_id: str = RUN) -> Committed:
    """A poll's hand-off of these (already stored) frames."""
    return Committed([run_id], {run_id: [[f.run_id, f.id, f.event, f.text, f.body_sha256, None, 0, ""]
                                         for f in frames]})


async def a_read_in_flight(store: FakeStore, hub: Notifier) -> None:
    """Wake the feed (as the fallback check would) and hold its read in the store."""
    store.gate.clear()
    store.reading.clear()
    hub.notify([RUN])
    await asyncio.to_thread(store.reading.wait, 10)


@pytest.mark.rule("D1")
async def test_frames_this_process_committed_are_handed_to_every_client_without_a_read() -> None:
    async with one_client() as (store, hub, first):
        second = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
        committed = store.commit(3)
        hub.notify(committed.feeds, committed)
        assert not hub._due, "taken at once: nothing for the reader"
        a, b = await first.next(), await second.next()
        assert [f.id for f in a] == [1, 2, 3] and all(x is y for x, y in zip(a, b, strict=True))
        assert [f.sse for f in a] == [f.sse for f in store.frames], "the bytes a read back makes"
        assert store.reads == 1, "no read but the feed's first"
        second.close()


@pytest.mark.rule("D1")
async def test_a_frame_both_read_back_and_handed_over_reaches_a_client_once() -> None:
    async with one_client() as (store, hub, subscription):
        store.add(2)
        await a_read_in_flight(store, hub)  # it will return frames 1-2
        hub.notify([RUN], handed(store.frames[0:2]))  # the poll that committed them hands them over meanwhile
        store.gate.set()
        await settle(lambda: hub.feeds[RUN].reads == 2, "the read delivered")
        store.add(1)
        hub.notify([RUN], handed(store.frames[1:3]))  # a hand-off repeating frame 2
        frames: list[Frame] = []
        while len(frames) < 3:
            frames += await asyncio.wait_for(subscription.next(), 10)
        assert [f.id for f in frames] == [1, 2, 3], "each frame once, whichever path brought it first"
        assert hub.feeds[RUN].cursor == 3 and store.reads == 2


@pytest.mark.rule("D1")
async def test_a_hand_off_after_a_gap_makes_the_feed_read_the_store() -> None:
    async with one_client() as (store, hub, subscription):
        store.add(2)  # committed by another instance; its notification has not arrived
        committed = store.commit(1)  # frame 3, committed here
        hub.notify(committed.feeds, committed)
        frames: list[Frame] = []
        while len(frames) < 3:
            frames += await asyncio.wait_for(subscription.next(), 10)
        assert [f.id for f in frames] == [1, 2, 3], "read from the store from the cursor on: no gap"
        assert store.reads == 2


@pytest.mark.rule("D1")
async def test_another_instances_frames_are_read_and_this_ones_handed_over_after_them() -> None:
    async with one_client() as (store, hub, subscription):
        wakeups = StoreWakeups(None, "me", hub)  # type: ignore[arg-type] # what it hears, without a listener
        store.add(2)  # another instance's poll, and its notification
        wakeups.heard('{"origin": "another", "runs": ["run-feed"]}')
        assert [f.id for f in await asyncio.wait_for(subscription.next(), 10)] == [1, 2]
        assert store.reads == 2, "another instance's frames are read from the store"
        committed = store.commit(2)
        hub.notify(committed.feeds, committed)
        assert [f.id for f in await asyncio.wait_for(subscription.next(), 10)] == [3, 4]
        assert store.reads == 2, "this process's frames follow the cursor: handed over, not read"


@pytest.mark.rule("D1")
async def test_a_client_joining_during_a_hand_off_gets_each_frame_once() -> None:
    async with one_client() as (store, hub, early):
        store.add(2)
        await a_read_in_flight(store, hub)  # it will return frames 1-2
        hub.notify([RUN], handed(store.frames[0:2]))
        late = hub.subscribe(RUN, store, 0)  # type: ignore[arg-type]
        assert late.floor == 2, "frames 1-2 were handed over before it joined: it reads them from the store"
        store.gate.set()
        await settle(lambda: hub.feeds[RUN].reads == 2, "the read delivered")
        committed = store.commit(1)
        hub.notify(committed.feeds, committed)
        frames: list[Frame] = []
        while len(frames) < 3:
            frames += await asyncio.wait_for(early.next(), 10)
        assert [f.id for f in frames] == [1, 2, 3]
        assert [f.id for f in await asyncio.wait_for(late.next(), 10)] == [3], "after its floor, once"
        assert not late.frames
        late.close()

"""The shared live feed over real PostgreSQL and HTTP: many clients of one run cost one
store read per wake-up, not one per client; a client whose subscription overflowed, or
that joins while frames are moving, reads the rest from the store without a gap or a
duplicate; a deletion ends every live stream."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from imprint.delivery.summary import validate_stream
from services.common.settings import Settings
from services.delivery.app import create_app
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.integration.delivery.support import SSE, Feeder, KafkaPublish, LiveServer, read_stream
from tests.support.waiting import wait_until
from tests.support.delivery_builders import closed, deleted, published, running, settled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class CountingStore(ViewStore):
    """The real store, counting the reads each path makes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.lock = threading.Lock()
        self.feed_reads = 0
        self.backlog_reads = 0

    def read_feeds(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.feed_reads += 1
        return super().read_feeds(*args, **kwargs)

    def frames_after(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.backlog_reads += 1
        return super().frames_after(*args, **kwargs)


class Served:
    def __init__(self, settings: Settings, notifier: Notifier) -> None:
        self.settings = settings
        self.store = CountingStore(settings)
        self.notifier = notifier
        self.publish = KafkaPublish(settings)
        # The fallback check is slow here: only the wake-ups move frames within the test.
        self.app = create_app(settings, self.store, self.publish, notifier=notifier, poll_interval=60)
        self.feeder = Feeder(self.store, notifier)


def serve(settings: Settings, notifier: Notifier) -> Iterator[tuple[Served, LiveServer]]:
    served = Served(settings, notifier)
    try:
        with LiveServer(served.app) as server:
            yield served, server
            served.publish.close()
    finally:
        served.store.close()


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[tuple[Served, LiveServer]]:
    yield from serve(isolated, Notifier(poll_interval=60))


def token(served: Served, account: str = "acct-1") -> str:
    from services.delivery.auth import mint_token

    return mint_token(served.settings, account)


class Reader(threading.Thread):
    def __init__(self, url: str, run_id: str, token: str, last_event_id: int | None = None) -> None:
        super().__init__(daemon=True)
        self.args = (url, run_id, token)
        self.last_event_id = last_event_id
        self.frames: list[SSE] = []
        self.ended = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.frames, self.ended = read_stream(*self.args, last_event_id=self.last_event_id, timeout=60)
        except BaseException as error:  # reported by the test
            self.error = error


def held(frames: list[SSE]) -> list[tuple[int, str, object]]:
    return [(f.id, f.event, f.data if f.event == "done" else f.json) for f in frames]  # type: ignore[misc]


@pytest.mark.rule("D1")
def test_every_client_of_a_run_gets_every_frame_from_one_read_per_wake_up(delivery: tuple[Served, LiveServer]) -> None:
    served, server = delivery
    run = "run-fan"
    served.feeder.send(running(run), published(run, "b1", 1, "first", 1))
    clients = 25
    readers = [Reader(server.base_url, run, token(served)) for _ in range(clients)]
    for reader in readers:
        reader.start()
    wait_until(lambda: served.notifier.subscribers() == clients, "every client following the feed")
    backlog, feed_before = served.store.backlog_reads, served.store.feed_reads

    for i in range(2, 6):  # four batches, one wake-up each
        served.feeder.send(published(run, f"b{i}", 1, f"block {i}", i))
        wait_until(lambda i=i: served.notifier.feeds[run].cursor >= i + 1, f"the feed reading batch {i}")
    served.feeder.send(settled(run), closed(run, "the end"))
    for reader in readers:
        reader.join(60)
        assert reader.error is None, reader.error
        assert reader.ended, "done ends every stream"

    expected = held(readers[0].frames)
    assert [i for i, _, _ in expected] == list(range(1, expected[-1][0] + 1)), "ids from 1, no gap, no duplicate"
    assert validate_stream(expected).ok
    for reader in readers[1:]:
        assert held(reader.frames) == expected, "every client saw the same frames"
    assert served.store.backlog_reads == backlog, "no client read the store once it followed the feed"
    live_reads = served.store.feed_reads - feed_before
    assert live_reads <= 5 + 2, f"{live_reads} feed reads for 5 batches and {clients} clients"


@pytest.mark.rule("D1")
def test_an_overflowing_client_reads_the_rest_from_the_store_without_gap_or_duplicate(isolated: Settings) -> None:
    for served, server in serve(isolated, Notifier(poll_interval=60, buffer_limit=3)):
        run = "run-burst"
        served.feeder.send(running(run))
        reader = Reader(server.base_url, run, token(served))
        reader.start()
        wait_until(lambda: served.notifier.subscribers() == 1, "the client following the feed")
        # One batch of 40 frames: more than the subscription holds, so it lags and catches up.
        served.feeder.send(*[published(run, f"b{i}", 1, f"block {i}", i) for i in range(1, 40)],
                           settled(run), closed(run, "fin"))
        reader.join(60)
        assert reader.error is None, reader.error
        ids = [f.id for f in reader.frames]
        assert ids == list(range(1, ids[-1] + 1)) and reader.frames[-1].event == "done"
        assert validate_stream(held(reader.frames)).ok


@pytest.mark.rule("D1")
def test_clients_joining_while_frames_move_get_each_frame_once(delivery: tuple[Served, LiveServer]) -> None:
    served, server = delivery
    run = "run-join"
    served.feeder.send(running(run))
    readers: list[Reader] = []
    for i in range(1, 31):
        served.feeder.send(published(run, f"b{i}", 1, f"block {i}", i))
        if i % 3 == 0:
            reader = Reader(server.base_url, run, token(served), last_event_id=i // 2)
            reader.start()
            readers.append(reader)
    served.feeder.send(settled(run), closed(run, "fin"))
    for reader in readers:
        reader.join(60)
        assert reader.error is None, reader.error
        ids = [f.id for f in reader.frames]
        assert reader.ended and ids == list(range(reader.last_event_id + 1, ids[-1] + 1)), ids  # type: ignore[operator]


@pytest.mark.rule("X8")
def test_a_deletion_ends_every_live_stream_of_the_run(delivery: tuple[Served, LiveServer]) -> None:
    served, server = delivery
    run = "run-gone"
    served.feeder.send(running(run, conversation="conv-gone"), published(run, "b1", 1, "secret", 1))
    readers = [Reader(server.base_url, run, token(served)) for _ in range(3)]
    for reader in readers:
        reader.start()
    wait_until(lambda: served.notifier.subscribers() == 3, "the clients following the feed")
    served.feeder.send(deleted(run, "conv-gone"))
    for reader in readers:
        reader.join(30)
        assert reader.error is None, reader.error
        assert reader.ended, "the server ended the stream"
        assert [f.id for f in reader.frames] == [1, 2]

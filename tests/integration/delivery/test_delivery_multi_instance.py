"""Two Delivery processes behind no sticky session: real Kafka, PostgreSQL and HTTP.

Both instances are one consumer group over the publication and runs topics (one
partition each here, so each instance owns exactly one of them: every run's frames are
consumed partly by each instance) writing one shared view store. Their fallback check
is set to a minute, so within the test only the PostgreSQL ``NOTIFY`` wake-ups can move
a frame from the instance that consumed it to a client of the other one."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from imprint.contracts.topics import Topic
from imprint.delivery.summary import validate_stream
from services.common.launcher import Child, Launcher
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.integration.delivery.support import SSE, free_port, read_stream
from tests.support.kafka import produce, read_topic
from tests.support.delivery_builders import closed, published, running, settled, withdrawn
from tests.support.sse import read_notices

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180),
              pytest.mark.backends("postgres", reason="several Delivery instances share one store "
                                                    "(the embedded SQLite has one instance)")]


@dataclass
class Instance:
    name: str
    child: Child

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.child.settings.http_port}"


def start(launcher: Launcher, settings: Settings, name: str) -> Instance:
    own = settings.model_copy(update={
        "http_port": free_port(), "sse_poll_seconds": 60.0, "sse_keepalive_seconds": 1.0,
        "stream_open_wait_seconds": 1.0})  # a stream for an unknown run waits this long, then 404
    return Instance(name, launcher.start("delivery", name=f"delivery-{name}", settings=own))


def assignment(settings: Settings) -> dict[int, list[str]]:
    """The group's members by process id (their client id), with the topics each owns."""

    async def describe() -> dict[int, list[str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            [response] = await admin.describe_consumer_groups([f"{settings.group_prefix}.delivery"])
        finally:
            await admin.close()
        group = response.groups[0]
        owned: dict[int, list[str]] = {}
        for member in next(field for field in group if isinstance(field, list)):
            client_id = next(f for f in member if isinstance(f, str) and re.fullmatch(r"imprint-delivery-\d+", f))
            raw = [f for f in member if isinstance(f, bytes)][-1]
            topics = [t for t, partitions in ConsumerProtocolMemberAssignment.decode(raw).assignment if partitions]
            owned[int(client_id.rsplit("-", 1)[1])] = sorted(topics)
        return owned

    return asyncio.run(describe())


@pytest.fixture
def pair(isolated: Settings) -> Iterator[tuple[Instance, Instance]]:
    launcher = Launcher(isolated, grace=20.0)
    a = start(launcher, isolated, "a")
    b = start(launcher, isolated, "b")
    try:
        launcher.wait_ready()
        deadline = time.monotonic() + 60
        while True:  # until the group settled with one topic partition on each instance
            owned = assignment(isolated)
            if sorted(owned) == sorted([a.pid, b.pid]) and all(len(t) == 1 for t in owned.values()):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the consumer group never split the topics: {owned}")
            time.sleep(0.5)
        yield a, b
    except BaseException:
        for name in launcher.children:
            print(launcher.tail(name, 3000), file=sys.stderr)
        raise
    finally:
        launcher.stop_all()


class Reader(threading.Thread):
    def __init__(self, url: str, run_id: str, token: str, *, last_event_id: int | None = None,
                 until: Any = None) -> None:
        super().__init__(daemon=True)
        self.args = (url, run_id, token)
        self.last_event_id = last_event_id
        self.until = until
        self.frames: list[SSE] = []
        self.seen = 0
        self.ended = False
        self.error: BaseException | None = None

    def _until(self, frames: list[SSE]) -> bool:
        self.seen = len(frames)
        return bool(self.until is not None and self.until(frames))

    def run(self) -> None:
        try:
            self.frames, self.ended = read_stream(*self.args, last_event_id=self.last_event_id, until=self._until,
                                                  timeout=40)
        except BaseException as error:
            self.error = error

    def result(self) -> list[SSE]:
        self.join(60)
        assert self.error is None, self.error
        return self.frames


def wait_for_run(instance: Instance, run_id: str, token: str, frames: int = 1) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = httpx.get(f"{instance.url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
        if response.status_code == 200 and response.json()["last_event_id"] >= frames:
            return
        time.sleep(0.1)
    raise AssertionError(f"delivery {instance.name} never learned run {run_id}")


def held(frames: list[SSE]) -> list[tuple[int, str, object]]:
    return [(f.id, f.event, f.data if f.event == "done" else f.json) for f in frames]  # type: ignore[misc]


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
@pytest.mark.rule("D6")
def test_clients_on_either_instance_follow_live_and_resume_on_the_other(
        isolated: Settings, pair: tuple[Instance, Instance]) -> None:
    a, b = pair
    owned = assignment(isolated)
    publication = isolated.topic(Topic.PUBLICATION)
    consumer_of_blocks = a if owned[a.pid] == [publication] else b
    other = b if consumer_of_blocks is a else a
    run, token = "run-two-instances", mint_token(isolated, "acct-1")

    asyncio.run(produce(isolated, Topic.RUNS, running(run)))
    wait_for_run(a, run, token)
    # D6 holds on both instances: another account's client learns nothing of the run.
    stranger = mint_token(isolated, "acct-2")
    for instance in (a, b):
        response = httpx.get(f"{instance.url}/v1/runs/{run}/events", headers={"Authorization": f"Bearer {stranger}"},
                             timeout=30)  # the 404 comes after the same bounded wait as for a missing run
        assert response.status_code == 404

    # One client on each instance, live from the start; a third on the instance that does
    # not consume the blocks, which drops after three frames and resumes on the other.
    live = {instance.name: Reader(instance.url, run, token) for instance in (a, b)}
    mover = Reader(other.url, run, token, until=lambda fs: len(fs) >= 3)
    for reader in (*live.values(), mover):
        reader.start()
    deadline = time.monotonic() + 20
    while not all(r.seen >= 1 for r in (*live.values(), mover)):  # every stream holds frame 1 (run status)
        assert time.monotonic() < deadline, "the streams never opened"
        time.sleep(0.05)

    asyncio.run(produce(isolated, Topic.PUBLICATION,
                        *[published(run, f"b{i}", 1, f"block {i}", i) for i in range(1, 4)]))
    first = mover.result()
    assert [f.id for f in first] == [1, 2, 3] and not mover.ended, "block frames reached the other instance live"

    asyncio.run(produce(isolated, Topic.PUBLICATION,
                        *[published(run, f"b{i}", 1, f"block {i}", i) for i in range(4, 7)], settled(run)))
    asyncio.run(produce(isolated, Topic.RUNS, closed(run, "the closed answer text, long enough for two chunks")))
    resumed = Reader(consumer_of_blocks.url, run, token, last_event_id=first[-1].id)
    resumed.start()
    second = resumed.result()
    assert resumed.ended, "the stream resumed on the other instance ran to done"
    ids = [f.id for f in first + second]
    assert ids == list(range(1, ids[-1] + 1)), f"no gap and no duplicate across instances: {ids}"

    expected = held(first + second)
    assert validate_stream(expected).ok
    for name, reader in live.items():
        frames = reader.result()
        assert reader.ended, f"the client on {name} got done live"
        assert held(frames) == expected, f"the client on {name} saw every frame, the same ids as the others"

    # D4/D5: each connection's delivery facts, once, from the instance that served it.
    receipt = httpx.post(f"{other.url}/v1/runs/{run}/receipts", headers={"Authorization": f"Bearer {token}"},
                         json={"type": "client.received", "last_event_id": ids[-1]})
    assert receipt.status_code == 202

    def complete(values: list[dict[str, Any]]) -> bool:
        kinds = [v["type"] for v in values]
        return kinds.count("delivery.completed") >= 3 and "delivery.interrupted" in kinds and "client.received" in kinds

    facts = asyncio.run(read_topic(isolated, Topic.DELIVERY, until=complete, timeout=30))
    time.sleep(1.0)
    facts = asyncio.run(read_topic(isolated, Topic.DELIVERY, until=lambda v: len(v) >= len(facts), timeout=30))
    ended = [f for f in facts if f["type"] in ("delivery.completed", "delivery.interrupted")]
    by_connection: dict[str, list[str]] = {}
    for fact in ended:
        by_connection.setdefault(fact["connection_id"], []).append(fact["type"])
    assert sorted(kinds[0] for kinds in by_connection.values()) == [
        "delivery.completed", "delivery.completed", "delivery.completed", "delivery.interrupted"]
    assert all(len(kinds) == 1 for kinds in by_connection.values()), f"one outcome per connection: {by_connection}"
    assert [f["type"] for f in facts].count("client.received") == 1, "a receipt is published once"
    assert len({f["event_id"] for f in facts}) == len(facts), "no fact published twice"
    status = httpx.get(f"{a.url}/v1/runs/{run}", headers={"Authorization": f"Bearer {token}"}).json()
    assert status["last_event_id"] == ids[-1] and status["terminal"]


def listeners(settings: Settings) -> list[int]:
    """Backends of the Delivery instances' ``LISTEN`` connections."""
    import psycopg

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        rows = connection.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                  "AND query LIKE 'LISTEN \"imprint_delivery_%%'").fetchall()
    return [int(pid) for (pid,) in rows]


@pytest.mark.rule("D1")
def test_a_lost_wake_up_connection_loses_no_frame(isolated: Settings, pair: tuple[Instance, Instance]) -> None:
    import psycopg

    a, b = pair
    owned = assignment(isolated)
    publication = isolated.topic(Topic.PUBLICATION)
    # The watcher's clients' blocks must come from the other instance, through the store's
    # NOTIFY: an instance that consumes the publication topic wakes its own feeds in-process.
    watcher = b if publication in owned[a.pid] else a
    assert publication not in owned[watcher.pid]
    run, token = "run-lost-wakeup", mint_token(isolated, "acct-1")
    asyncio.run(produce(isolated, Topic.RUNS, running(run)))
    wait_for_run(watcher, run, token)
    reader = Reader(watcher.url, run, token)
    reader.start()
    deadline = time.monotonic() + 20
    while reader.seen < 1:
        assert time.monotonic() < deadline, "the stream never opened"
        time.sleep(0.05)
    before = listeners(isolated)
    assert len(before) == 2, f"one LISTEN connection per instance: {before}"
    assert isolated.database_url is not None
    with psycopg.connect(isolated.database_url, autocommit=True) as connection:
        for pid in before:  # both instances lose their wake-ups; frames committed now are not announced to them
            connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
    asyncio.run(produce(isolated, Topic.PUBLICATION,
                        *[published(run, f"b{i}", 1, f"block {i}", i) for i in range(1, 4)], settled(run)))
    asyncio.run(produce(isolated, Topic.RUNS, closed(run, "closed while nobody listened")))
    frames = reader.result()
    assert reader.ended, "the reconnected listener woke the feed (the fallback check is a minute away)"
    ids = [f.id for f in frames]
    assert ids == list(range(1, ids[-1] + 1)) and validate_stream(held(frames)).ok
    deadline = time.monotonic() + 15  # the other instance reconnects on its own schedule (1 s back-off)
    while not (len(listeners(isolated)) == 2 and not set(listeners(isolated)) & set(before)):
        assert time.monotonic() < deadline, f"both listen again on new connections: {listeners(isolated)}"
        time.sleep(0.1)


@pytest.mark.rule("D6")
@pytest.mark.rule("D1")
def test_a_stream_ticket_minted_on_one_instance_opens_the_stream_on_the_other(
        isolated: Settings, pair: tuple[Instance, Instance]) -> None:
    a, b = pair
    run, token = "run-ticket-two-instances", mint_token(isolated, "acct-1")
    asyncio.run(produce(isolated, Topic.RUNS, running(run)))
    wait_for_run(a, run, token)
    wait_for_run(b, run, token)
    minted = httpx.post(f"{a.url}/v1/runs/{run}/stream-tickets", headers={"Authorization": f"Bearer {token}"})
    assert minted.status_code == 201
    ticket = minted.json()["ticket"]
    # A browser's EventSource reconnect may land on any instance: the ticket is shared.
    with httpx.stream("GET", f"{b.url}/v1/runs/{run}/events", params={"ticket": ticket}, timeout=10) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("id:"):
                break
    other_run = httpx.get(f"{b.url}/v1/runs/run-someone-else/events", params={"ticket": ticket}, timeout=10)
    assert other_run.status_code == 401, "a ticket opens its own run only, on every instance"


@pytest.mark.rule("D7")
@pytest.mark.rule("D1")
def test_a_notice_born_on_one_instance_wakes_a_follower_of_the_conversation_on_the_other(
        isolated: Settings, pair: tuple[Instance, Instance]) -> None:
    a, b = pair
    owned = assignment(isolated)
    # The follower's instance does not consume the publication topic: the notice is born on the
    # other one, and with the fallback check a minute away only the store's NOTIFY can bring it.
    watcher = b if isolated.topic(Topic.PUBLICATION) in owned[a.pid] else a
    run, conv, token = "run-notice-two-instances", "conv-notice-two-instances", mint_token(isolated, "acct-1")
    asyncio.run(produce(isolated, Topic.RUNS, running(run, conversation=conv)))
    asyncio.run(produce(isolated, Topic.PUBLICATION, published(run, "b1", 1, "one", 1),
                        published(run, "b2", 1, "two", 2), settled(run)))
    asyncio.run(produce(isolated, Topic.RUNS, closed(run, "closed", conversation=conv)))
    deadline = time.monotonic() + 30
    while not httpx.get(f"{watcher.url}/v1/runs/{run}", headers={"Authorization": f"Bearer {token}"}).json().get(
            "terminal"):
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.1)
    comments: list[str] = []
    got: dict[str, Any] = {}

    def follow() -> None:
        try:
            got["frames"], _ = read_notices(watcher.url, conv, token, until=lambda fs: len(fs) >= 1, timeout=40,
                                            comments=comments)
        except BaseException as error:
            got["error"] = error

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    while not comments:  # a keep-alive: the stream is following live
        assert time.monotonic() < deadline + 20 and follower.is_alive(), got
        time.sleep(0.05)
    asyncio.run(produce(isolated, Topic.PUBLICATION, withdrawn(run, "b2", 1, "source_revoked")))
    follower.join(40)
    assert "error" not in got, got
    [notice] = got["frames"]
    assert (notice.id, notice.event, notice.json["block_id"], notice.json["run_id"]) == (1, "notice", "b2", run)

"""Real-HTTP helpers for the delivery tiers: uvicorn on 127.0.0.1 in a thread, a
feeder that drives ``ViewStore.process()`` with Inbound records (the Kafka consumer's
job, until it is wired), a real Kafka ``publish``, message builders, an SSE reader
and a killable TCP proxy."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import uvicorn
from aiokafka import AIOKafkaProducer

from imprint.contracts.base import Message
from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.delivery.app import create_app, topic_for
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.support.net import free_port
from tests.unit.delivery.delivery_builders import block, closed, preview, published, running  # noqa: F401

T = TypeVar("T")


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off", timeout_graceful_shutdown=2))
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class KafkaPublish:
    """``publish`` for create_app: each contract message to its topic on the real broker.
    The producer lives on the server's event loop (started on first use)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: AIOKafkaProducer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sent: list[Message] = []

    async def __call__(self, message: Message) -> None:
        if self.producer is None:
            self.loop = asyncio.get_running_loop()
            producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True)
            await producer.start()
            if self.producer is None:
                self.producer = producer
            else:
                await producer.stop()
        key = getattr(message, "key", None)
        await self.producer.send_and_wait(
            self.settings.topic(topic_for(message)), encode(message),
            key=key.encode() if isinstance(key, str) else None, headers=[("type", message.type.encode())],
        )
        self.sent.append(message)

    def close(self) -> None:
        if self.producer is not None and self.loop is not None and not self.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self.producer.stop(), self.loop).result(timeout=10)
            except Exception:
                pass


class Feeder:
    """Plays the Kafka consumer: Inbound records with increasing offsets per topic."""

    def __init__(self, store: ViewStore, notifier: Notifier) -> None:
        self.store = store
        self.notifier = notifier
        self.offsets: dict[str, itertools.count[int]] = {}
        self.history: list[Inbound] = []

    def inbound(self, message: Any) -> Inbound:
        topic = Topic.RUNS.value if message.type.startswith(("run.", "conversation.")) else Topic.PUBLICATION.value
        offset = next(self.offsets.setdefault(topic, itertools.count(0)))
        return Inbound(topic, 0, offset, message)

    def send(self, *messages: Any) -> list[str]:
        batch = [self.inbound(m) for m in messages]
        self.history.extend(batch)
        return self.replay(batch)

    def replay(self, batch: list[Inbound]) -> list[str]:
        touched = self.store.process(batch)
        self.notifier.notify_threadsafe(touched)
        return touched


# ----------------------------------------------------------------------- SSE reading

@dataclass(frozen=True)
class SSE:
    id: int | None
    event: str
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse(lines: Iterator[str], on_frame: Callable[[SSE], bool], comments: list[str] | None = None) -> None:
    """Feed decoded lines; ``on_frame`` returns True to stop."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields or "event" in fields:
                frame = SSE(int(fields["id"]) if "id" in fields else None, fields.get("event", "message"),
                            fields.get("data", ""))
                fields = {}
                if on_frame(frame):
                    return
            fields = {}
            continue
        if line.startswith(":"):
            if comments is not None:
                comments.append(line)
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value


def read_stream(base_url: str, run_id: str, token: str, *, last_event_id: int | None = None,
                via_query: bool = False, until: Callable[[list[SSE]], bool] | None = None,
                timeout: float = 20.0, comments: list[str] | None = None) -> tuple[list[SSE], bool]:
    """Read frames until ``until`` holds (then drop the connection) or the server ends
    the stream. Returns (frames, ended_by_server)."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    url = f"{base_url}/v1/runs/{run_id}/events"
    if last_event_id is not None:
        if via_query:
            url += f"?last_event_id={last_event_id}"
        else:
            headers["Last-Event-ID"] = str(last_event_id)
    frames: list[SSE] = []
    stopped = False

    def on_frame(frame: SSE) -> bool:
        nonlocal stopped
        frames.append(frame)
        if until is not None and until(frames):
            stopped = True
        return stopped

    deadline = time.monotonic() + timeout

    def lines(response: httpx.Response) -> Iterator[str]:
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"stream read timed out; frames so far: {[(f.id, f.event) for f in frames]}")
            yield line

    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(timeout, connect=5)) as response:
        assert response.status_code == 200, (response.status_code, response.read())
        parse_sse(lines(response), on_frame, comments)
    return frames, not stopped


# ----------------------------------------------------------------------- TCP proxy

class KillableProxy:
    """A TCP forwarder whose live connections can be killed (both sides reset)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.accepted = 0
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.accepted += 1
                self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def kill_all(self) -> int:
        with self.lock:
            victims, self.connections = self.connections, []
        for s in victims:
            try:  # linger 0: reset, not a graceful close; shutdown wakes the pipe threads' recv
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        return len(victims) // 2

    def close(self) -> None:
        self.running = False
        self.listener.close()
        self.kill_all()


def off_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh loop in another thread (Playwright's sync API keeps a
    loop on the test thread, so ``asyncio.run`` is not available there)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


# ----------------------------------------------------------------------- a running Delivery

@dataclass
class Delivery:
    settings: Settings
    store: ViewStore
    notifier: Notifier
    publish: KafkaPublish
    feeder: Feeder
    server: LiveServer
    app: Any

    @property
    def url(self) -> str:
        return self.server.base_url

    def token(self, account: str = "acct-1", ttl: float | None = None) -> str:
        return mint_token(self.settings, account, ttl)


def start_delivery(settings: Settings, **app_options: Any) -> Iterator[Delivery]:
    store = ViewStore(settings)
    notifier = Notifier()
    publish = KafkaPublish(settings)
    app = create_app(settings, store, publish, notifier=notifier, poll_interval=0.5, **app_options)
    try:
        with LiveServer(app) as server:
            yield Delivery(settings, store, notifier, publish, Feeder(store, notifier), server, app)
            publish.close()
    finally:
        store.close()

"""Real-HTTP helpers for the delivery tiers: uvicorn on 127.0.0.1 in a thread, a
feeder that drives ``ViewStore.commit()`` with Inbound records and hands what it
committed to the live feeds (the Kafka consumer's job), a real Kafka ``publish``,
message builders, an SSE reader and a killable TCP proxy."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn
from aiokafka import AIOKafkaProducer

from imprint.contracts.base import Message
from imprint.contracts.registry import encode
from imprint.delivery.feeds import conversation_of
from services.common.settings import Settings
from services.common.inbound import Inbound
from imprint.contracts.registry import topic_of
from services.delivery.app import create_app
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.support.feeder import Feeder as OneFeeder
from tests.support.net import free_port
from tests.support.sse import SSE, parse_sse, read_stream  # noqa: F401 - the one SSE reader, re-exported
from tests.support.delivery_builders import block, closed, preview, published, running  # noqa: F401

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
            self.settings.topic(topic_of(message)), encode(message),
            key=key.encode() if isinstance(key, str) else None, headers=[("type", message.type.encode())],
        )
        self.sent.append(message)

    def close(self) -> None:
        if self.producer is not None and self.loop is not None and not self.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self.producer.stop(), self.loop).result(timeout=10)
            except Exception:
                pass


class Feeder(OneFeeder[list[str]]):
    """The one feeder (``tests.support.feeder``) playing Delivery's Kafka consumer: each poll
    goes to the store and the live feeds it changed are notified (runs, and conversations'
    notices); ``send`` returns the runs."""

    def __init__(self, store: ViewStore, notifier: Notifier) -> None:
        self.store = store
        self.notifier = notifier
        super().__init__(self._process)

    def _process(self, batch: list[Inbound]) -> list[str]:
        committed = self.store.commit(batch)
        self.notifier.notify_threadsafe(committed.feeds, committed)
        return [feed for feed in committed.feeds if conversation_of(feed) is None]


# ----------------------------------------------------------------------- TCP proxy

class KillableProxy:
    """A TCP forwarder whose live connections can be killed (both sides reset). New
    connections go to ``target_port`` as it is when they arrive: set it to move the
    clients behind the proxy to another server at their next connection."""

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


def start_delivery(settings: Settings, *, store_name: str = "delivery", fallback_seconds: float = 1.0,
                   **app_options: Any) -> Iterator[Delivery]:
    """A Delivery app on uvicorn over its view store (``store_name``: another name is a
    store of its own in the same database, e.g. the deployment restored from a backup;
    ``fallback_seconds``: the live feeds' check for a lost wake-up)."""
    store = ViewStore(settings, name=store_name)
    notifier = Notifier(poll_interval=fallback_seconds)
    publish = KafkaPublish(settings)
    app = create_app(settings, store, publish, notifier=notifier, poll_interval=0.5, **app_options)
    try:
        with LiveServer(app) as server:
            yield Delivery(settings, store, notifier, publish, Feeder(store, notifier), server, app)
            publish.close()
    finally:
        store.close()


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of a bearer token."""
    return {"Authorization": f"Bearer {token}"}

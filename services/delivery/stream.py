"""The streaming responses of one run: ``GET /v1/runs/{run_id}/events`` (imprint's
SSE frames) and the AI SDK UI message stream (the same frames as UI message parts) —
and of a conversation's notices (D7: the same response over the notices' feed,
:mod:`services.delivery.notices`, which never writes ``done``).

Two tasks per connection:

* **feed** reads ``frames_after(last)`` from the store (the single source of frames
  — a new client, a resuming client and a live client run the same code) and writes
  them, then follows the run's shared live feed (:mod:`services.delivery.notifier`),
  writing what each wake-up brings as one body, a keep-alive comment when idle, and
  finishes the response right after ``done``;
* **listener** watches for the client's disconnect.

The stream itself keeps the :class:`DeliveryReport` of what it wrote (frame ids,
``done``, whether the response finished before the client left) and hands it to
``report_to`` when the connection ends: that is what records ``delivery.sent`` /
``delivery.completed`` / ``delivery.interrupted`` (D4). No side channel reads the
bytes back.

A stream that starts over (D8: a ``Last-Event-ID`` the run cannot continue from) is
given its ``reset`` frame: written with the opening, before the frames from id 1.

A client whose socket takes no write for ``slow_client_timeout`` seconds is dropped
(its connection is closed; the process and other clients are untouched). Frames a
client has not yet been handed wait in its subscription, at most ``queue_size`` of
them; past that it reads them from the store when it catches up. A dropped
connection is an interruption, never a cancel: only ``POST …/cancel`` stops a run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import Response

from imprint.delivery.frames import DONE, Frame
from services.common.observability import get_logger
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import FeedSource, Notifier
from services.delivery.stream_formats import (  # the forms stay importable from here too
    RETRY_MS, SSEFrames, StreamFormat, UIMessageParts, UINoticeParts,
)

log = get_logger(__name__)

MAX_BODY_BYTES = 256 * 1024
"""The most one write to a client carries: a backlog goes out in writes of this size."""


@dataclass
class StreamConfig:
    keepalive: float = 15.0
    queue_size: int = 1000
    slow_client_timeout: float = 30.0
    poll_interval: float = 1.0
    page: int = 500


@dataclass
class DeliveryReport:
    """What one connection wrote, kept by the stream as it writes (D4)."""

    run_id: str
    account_id: str
    connection_id: str
    resumed_from: int = 0
    stream: str = "sse"
    reset: str | None = None
    """The stream started over with a ``reset`` (D8): its reason."""
    frames: int = 0
    last_event_id: int = 0
    terminal_sent: bool = False
    """``done`` went out before the client left."""
    finished: bool = False
    """The final, empty body went out before the client left."""
    disconnected: bool = False
    end_reason: str | None = None
    """``slow_client`` (dropped), ``nothing_more`` (resumed after the terminal),
    ``gone`` (the run was deleted)."""

    def wrote(self, frame: Frame) -> None:
        if self.disconnected:
            return  # uvicorn drops writes after a disconnect without raising
        self.frames += 1
        self.last_event_id = frame.id
        if frame.event == DONE:
            self.terminal_sent = True

    def client_left(self) -> None:
        """The client disconnected (before the response finished, or it does not count)."""
        if not self.finished:
            self.disconnected = True

    def response_finished(self) -> None:
        """The final body went out: it counts only if the client had not left first."""
        if not self.disconnected:
            self.finished = True

    def outcome(self) -> str | None:
        """``completed`` | ``interrupted`` | ``None`` (no delivery fact to record)."""
        if self.terminal_sent and self.finished:
            return "completed"
        if self.finished and not self.disconnected and self.end_reason in ("nothing_more", "gone"):
            return None
        return "interrupted"


ReportTo = Callable[[DeliveryReport], Awaitable[None]]


class Head(Protocol):
    deleted: bool
    terminal: bool
    last_frame_id: int


class FrameSource(FeedSource, Protocol):
    """What a stream reads: a run's frames (:class:`services.delivery.view_store.ViewStore`)
    or a conversation's notices (:class:`services.delivery.notices.NoticeFeeds`)."""

    def frames_after(self, key: str, last_id: int, limit: int = 1000) -> list[Frame]: ...

    def run(self, key: str) -> Head | None:
        """Where the feed stands (``None``: there is no such feed)."""
        ...


class _Watch:
    """One clock for every stream of an event loop. It drops a client whose write has not
    gone out for ``slow_client_timeout``, and it wakes a stream that has written nothing
    for ``keepalive`` (the stream then writes a keep-alive comment). A timer per write and
    per wait would cost more than the writes themselves when a run has many clients."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.streams: set[EventStream] = set()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of_running_loop(cls) -> _Watch:
        loop = asyncio.get_running_loop()
        watch = _WATCHES.get(id(loop))
        if watch is None or watch.loop is not loop:
            watch = _WATCHES[id(loop)] = cls(loop)
        return watch

    def add(self, stream: EventStream) -> None:
        self.streams.add(stream)
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._run(), name="sse-watch")

    def discard(self, stream: EventStream) -> None:
        self.streams.discard(stream)

    async def _run(self) -> None:
        while self.streams:
            shortest = min(min(s.config.slow_client_timeout, s.config.keepalive) for s in self.streams)
            await asyncio.sleep(min(1.0, max(0.05, shortest / 2)))
            now = self.loop.time()
            for stream in list(self.streams):
                stream.check(now)


_WATCHES: dict[int, _Watch] = {}
"""The watch of each event loop (by the loop's id; a watch of a loop since gone is replaced)."""


class EventStream(Response):
    """An ASGI response streaming one run's frames (or one conversation's notices) after ``last_id``."""

    media_type = "text/event-stream"

    def __init__(self, *, run_id: str, last_id: int, store: FrameSource, notifier: Notifier,
                 config: StreamConfig, metrics: DeliveryMetrics, report: DeliveryReport,
                 report_to: ReportTo, form: StreamFormat | None = None, reset: Frame | None = None) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self.run_id = run_id
        self.last_id = last_id
        self.reset = reset
        """The ``reset`` frame this stream opens with (D8), or ``None``."""
        self.store = store
        self.notifier = notifier
        self.config = config
        self.metrics = metrics
        self.report = report
        self.report_to = report_to
        self.form: StreamFormat = form or SSEFrames()
        self._feed_task: asyncio.Task[None] | None = None
        self._subscription: Any = None
        self._sending_since: float | None = None
        self._last_write = 0.0
        self._slow = False
        self._keepalive_due = False

    def check(self, now: float) -> None:
        """The watch's look at this stream: drop it if a write is stuck, poke it if quiet."""
        if self._sending_since is not None:
            if now - self._sending_since > self.config.slow_client_timeout and self._feed_task is not None:
                self._slow = True
                self._feed_task.cancel()
        elif now - self._last_write >= self.config.keepalive and self._subscription is not None:
            self._keepalive_due = True
            self._subscription.poke()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._stream(receive, send)
        finally:
            await asyncio.shield(self.report_to(self.report))

    async def _stream(self, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache, no-store"),
            (b"x-accel-buffering", b"no"),
            *self.form.headers,
        ]})
        opening = self.form.opening()
        if self.reset is not None:
            opening += self.form.frame(self.reset)
            self.metrics.resets.labels(self.report.stream).inc()
        await send({"type": "http.response.body", "body": opening, "more_body": True})
        self.metrics.connections.inc()
        self.metrics.connections_opened.inc()
        feed = self._feed_task = asyncio.create_task(self._feed(send), name=f"sse-feed-{self.run_id}")
        listener = asyncio.create_task(self._listen(receive), name=f"sse-listener-{self.run_id}")
        self._last_write = asyncio.get_running_loop().time()
        watch = _Watch.of_running_loop()
        watch.add(self)
        try:
            done, _ = await asyncio.wait({feed, listener}, return_when=asyncio.FIRST_COMPLETED)
            failed = feed in done and not feed.cancelled() and feed.exception() is not None
            if self._slow:
                self.report.end_reason = "slow_client"
                self.metrics.slow_clients.inc()
                log.warning("slow client dropped", run_id=self.run_id)
            elif failed:
                log.error("stream failed", run_id=self.run_id, error=repr(feed.exception()))
            if self._slow or failed:
                # Try to end the response; a stuck client gets its connection closed.
                try:
                    await asyncio.wait_for(send({"type": "http.response.body", "body": b"", "more_body": False}), 1.0)
                except Exception:
                    pass
        finally:
            watch.discard(self)
            for task in (feed, listener):
                task.cancel()
            await asyncio.gather(feed, listener, return_exceptions=True)
            self.metrics.connections.dec()

    async def _feed(self, send: Any) -> None:
        """The backlog from the store, then the run's shared live feed (``self.notifier``:
        one store read per wake-up for every client of every run), each written as it
        comes. One task per client does both, so a wake-up costs each client one task
        switch and one send. A gap in the ids, an overflowed subscription or frames the
        feed read before this client joined are read from the store; ids at or below the
        last one sent are skipped (no duplicate). A send that cannot go out for
        ``slow_client_timeout`` seconds drops the client (see :class:`_Watch`)."""
        last = self.last_id
        config = self.config

        async def send_body(frames: list[Frame], body: bytes) -> None:
            nonlocal last
            await self._send(send, body)
            for frame in frames:
                self.report.wrote(frame)
            for event, count in Counter(frame.event for frame in frames).items():
                self.metrics.frames_sent.labels(event).inc(count)
            last = frames[-1].id

        async def write(frames: list[Frame]) -> bool:
            """Send the new ones in as few bodies as fit (one socket write each, at most
            ``queue_size`` frames or :data:`MAX_BODY_BYTES`, so a client that stops reading
            is caught at its next write); ``True`` once ``done`` went out."""
            fresh: list[Frame] = []
            for frame in frames:
                if frame.id > last:
                    fresh.append(frame)
                    if frame.event == DONE:
                        break
            chunk: list[Frame] = []
            parts: list[bytes] = []
            size = 0
            for index, frame in enumerate(fresh):
                parts.append(self.form.frame(frame))
                chunk.append(frame)
                size += len(parts[-1])
                if size >= MAX_BODY_BYTES or len(chunk) >= config.queue_size or index == len(fresh) - 1:
                    await send_body(chunk, b"".join(parts))
                    chunk, parts, size = [], [], 0
            if fresh and fresh[-1].event == DONE:
                await self._finish(send, self.form.closing(True))
                return True
            return False

        async def backlog() -> bool:
            while True:
                frames = await asyncio.to_thread(self.store.frames_after, self.run_id, last, config.page)
                if await write(frames):
                    return True
                if len(frames) < config.page:
                    return False

        async def end(reason: str) -> None:
            self.report.end_reason = reason
            await self._finish(send, self.form.closing(False))

        if await backlog():
            return
        record = await asyncio.to_thread(self.store.run, self.run_id)
        if record is None or record.deleted:
            return await end("gone")
        if record.terminal and last >= record.last_frame_id:
            return await end("nothing_more")
        subscription = self._subscription = self.notifier.subscribe(self.run_id, self.store, last,
                                                                    limit=config.queue_size)
        try:
            if subscription.floor > last and await backlog():
                return
            while True:
                frames = await subscription.next()
                if self._keepalive_due and not frames and not subscription.lagged and subscription.ended is None:
                    self._keepalive_due = False
                    await self._send(send, b": keep-alive\n\n")
                    continue
                if subscription.lagged or (frames and frames[0].id > last + 1):
                    subscription.lagged = False
                    if await backlog():
                        return
                if await write(frames):
                    return
                if subscription.ended is not None:
                    return await end(subscription.ended)
        finally:
            self._subscription = None
            subscription.close()

    async def _send(self, send: Any, body: bytes, *, more_body: bool = True) -> None:
        """One write to the client, watched: stuck for ``slow_client_timeout``, the watch
        drops it. Any write is also the stream's keep-alive."""
        loop = asyncio.get_running_loop()
        self._sending_since = loop.time()
        try:
            await send({"type": "http.response.body", "body": body, "more_body": more_body})
        finally:
            self._sending_since = None
            self._last_write = loop.time()
            self._keepalive_due = False

    async def _finish(self, send: Any, tail: bytes) -> None:
        if tail:
            await self._send(send, tail)
        # uvicorn drops writes after a disconnect without raising; give a pending
        # disconnect notice the chance to arrive before this counts as finished.
        await asyncio.sleep(0)
        await self._send(send, b"", more_body=False)
        self.report.response_finished()

    async def _listen(self, receive: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.report.client_left()
                return

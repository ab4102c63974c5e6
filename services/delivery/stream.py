"""The streaming responses of one run: ``GET /v1/runs/{run_id}/events`` (imprint's
SSE frames) and the AI SDK UI message stream (the same frames as UI message parts).

Three tasks per connection:

* **pump** reads ``frames_after(last)`` from the store (the single source of frames
  — a new client, a resuming client and a live client run the same code), puts them
  in a bounded per-client queue, then waits on the notifier (with a poll fallback);
* **writer** takes frames off the queue, writes each in the stream's
  :class:`StreamFormat`, a keep-alive comment when idle, and finishes the response
  right after ``done``;
* **listener** watches for the client's disconnect.

The stream itself keeps the :class:`DeliveryReport` of what it wrote (frame ids,
``done``, whether the response finished before the client left) and hands it to
``report_to`` when the connection ends: that is what records ``delivery.sent`` /
``delivery.completed`` / ``delivery.interrupted`` (D4). No side channel reads the
bytes back.

A client that leaves the queue full for ``slow_client_timeout`` seconds is dropped
(its connection is closed; the process and other clients are untouched). A dropped
connection is an interruption, never a cancel: only ``POST …/cancel`` stops a run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import Response

from imprint.delivery.frames import DONE, Frame
from imprint.delivery.ui_message_stream import DONE_EVENT, HEADER, UIMessageStream, encode
from services.common.observability import get_logger
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore

log = get_logger(__name__)

END = object()
RETRY_MS = 2000


class SlowClient(Exception):
    pass


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


class StreamFormat(Protocol):
    headers: list[tuple[bytes, bytes]]

    def opening(self) -> bytes: ...

    def frame(self, frame: Frame) -> bytes: ...

    def closing(self, terminal: bool) -> bytes: ...


class SSEFrames:
    """imprint's own SSE: ``id`` / ``event`` / ``data`` per frame (D1/D2)."""

    headers: list[tuple[bytes, bytes]] = []

    def opening(self) -> bytes:
        return f"retry: {RETRY_MS}\n\n".encode()

    def frame(self, frame: Frame) -> bytes:
        return frame.sse()

    def closing(self, terminal: bool) -> bytes:
        return b""


class UIMessageParts:
    """The AI SDK UI message stream (:mod:`imprint.delivery.ui_message_stream`)."""

    headers = [(HEADER[0].encode(), HEADER[1].encode())]

    def __init__(self, mapping: UIMessageStream) -> None:
        self.mapping = mapping

    def opening(self) -> bytes:
        return b"".join(encode(part) for part in self.mapping.start())

    def frame(self, frame: Frame) -> bytes:
        return b"".join(encode(part) for part in self.mapping.parts(frame))

    def closing(self, terminal: bool) -> bytes:
        return DONE_EVENT if terminal else b""


class EventStream(Response):
    """An ASGI response streaming one run's frames after ``last_id``."""

    media_type = "text/event-stream"

    def __init__(self, *, run_id: str, last_id: int, store: ViewStore, notifier: Notifier,
                 config: StreamConfig, metrics: DeliveryMetrics, report: DeliveryReport,
                 report_to: ReportTo, form: StreamFormat | None = None) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self.run_id = run_id
        self.last_id = last_id
        self.store = store
        self.notifier = notifier
        self.config = config
        self.metrics = metrics
        self.report = report
        self.report_to = report_to
        self.form: StreamFormat = form or SSEFrames()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._stream(receive, send)
        finally:
            await asyncio.shield(self.report_to(self.report))

    async def _stream(self, receive: Any, send: Any) -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=max(1, self.config.queue_size))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache, no-store"),
            (b"x-accel-buffering", b"no"),
            *self.form.headers,
        ]})
        await send({"type": "http.response.body", "body": self.form.opening(), "more_body": True})
        self.metrics.connections.inc()
        self.metrics.connections_opened.inc()
        pump = asyncio.create_task(self._pump(queue), name=f"sse-pump-{self.run_id}")
        writer = asyncio.create_task(self._write(queue, send), name=f"sse-writer-{self.run_id}")
        listener = asyncio.create_task(self._listen(receive), name=f"sse-listener-{self.run_id}")
        tasks = {pump, writer, listener}
        try:
            while True:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                if writer in done or listener in done:
                    break
                if pump in done:
                    error = pump.exception()
                    if error is None:
                        tasks.discard(pump)  # everything is queued; the writer finishes
                        continue
                    if isinstance(error, SlowClient):
                        self.report.end_reason = "slow_client"
                        self.metrics.slow_clients.inc()
                        log.warning("slow client dropped", run_id=self.run_id)
                    else:
                        log.error("stream pump failed", run_id=self.run_id, error=repr(error))
                    writer.cancel()
                    # Try to end the response; a stuck client gets its connection closed.
                    try:
                        await asyncio.wait_for(send({"type": "http.response.body", "body": b"",
                                                     "more_body": False}), 1.0)
                    except Exception:
                        pass
                    break
        finally:
            for task in (pump, writer, listener):
                task.cancel()
            await asyncio.gather(pump, writer, listener, return_exceptions=True)
            self.metrics.connections.dec()
        if writer.done() and not writer.cancelled() and writer.exception() is not None:
            log.warning("stream writer ended with an error", run_id=self.run_id, error=repr(writer.exception()))

    async def _pump(self, queue: asyncio.Queue[Any]) -> None:
        """The backlog from the store, then the run's shared live feed (``self.notifier``):
        one store read per run per wake-up for all its clients. A gap in the ids, an
        overflowed subscription or frames the feed read before this client joined are read
        from the store; ids at or below the last one sent are skipped (no duplicate)."""
        last = self.last_id
        config = self.config

        async def put(frames: list[Frame]) -> bool:
            nonlocal last
            for frame in frames:
                if frame.id <= last:
                    continue
                if queue.full():
                    try:
                        await asyncio.wait_for(queue.put(frame), config.slow_client_timeout)
                    except TimeoutError as error:
                        raise SlowClient() from error
                else:
                    queue.put_nowait(frame)
                last = frame.id
                if frame.event == "done":
                    return True
            return False

        async def backlog() -> bool:
            while True:
                frames = await asyncio.to_thread(self.store.frames_after, self.run_id, last, config.page)
                if await put(frames):
                    return True
                if len(frames) < config.page:
                    return False

        if await backlog():
            return
        record = await asyncio.to_thread(self.store.run, self.run_id)
        if record is None or record.deleted:
            self.report.end_reason = "gone"
            await queue.put(END)
            return
        if record.terminal and last >= record.last_frame_id:
            self.report.end_reason = "nothing_more"
            await queue.put(END)
            return
        subscription = self.notifier.subscribe(self.run_id, self.store, last)
        try:
            if subscription.floor > last and await backlog():
                return
            while True:
                frames = await subscription.next()
                if subscription.lagged or (frames and frames[0].id > last + 1):
                    subscription.lagged = False
                    if await backlog():
                        return
                if await put(frames):
                    return
                if subscription.ended is not None:
                    self.report.end_reason = subscription.ended
                    await queue.put(END)
                    return
        finally:
            subscription.close()

    async def _write(self, queue: asyncio.Queue[Any], send: Any) -> None:
        """Write what the pump queued. Everything already queued goes out as ONE body (one
        send, one socket write): at a wake-up every client of a run has the same few frames
        waiting, and a send per frame was most of the fan-out's cost. Waiting uses
        ``asyncio.timeout``, not ``wait_for`` (no task per frame)."""
        while True:
            if queue.empty():
                try:
                    async with asyncio.timeout(self.config.keepalive):
                        item = await queue.get()
                except TimeoutError:
                    await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})
                    continue
            else:
                item = queue.get_nowait()
            items = [item]
            while items[-1] is not END and items[-1].event != DONE and not queue.empty():
                items.append(queue.get_nowait())
            frames: list[Frame] = [i for i in items if i is not END]
            body = b"".join(self.form.frame(frame) for frame in frames)
            if body:
                await send({"type": "http.response.body", "body": body, "more_body": True})
            for frame in frames:
                self.report.wrote(frame)
            for event, count in Counter(frame.event for frame in frames).items():
                self.metrics.frames_sent.labels(event).inc(count)
            if items[-1] is END:
                await self._finish(send, self.form.closing(False))
                return
            if items[-1].event == DONE:
                await self._finish(send, self.form.closing(True))
                return

    async def _finish(self, send: Any, tail: bytes) -> None:
        if tail:
            await send({"type": "http.response.body", "body": tail, "more_body": True})
        # uvicorn drops writes after a disconnect without raising; give a pending
        # disconnect notice the chance to arrive before this counts as finished.
        await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self.report.response_finished()

    async def _listen(self, receive: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.report.client_left()
                return

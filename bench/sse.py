"""A lean SSE client for many concurrent connections: one asyncio ``Protocol`` per
connection, no HTTP library, so a thousand clients cost the bench process little CPU
(it shares the two cores with the system it measures).

It sends ``GET /v1/runs/{run}/events`` with a bearer token over HTTP/1.1 and records,
for each ``answer-preview`` / ``answer-publication`` frame, the monotonic time its
bytes arrived, keyed by the ``(mk:<call>)`` marker the block body starts with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from bench.workload import MARKER

EVENTS = {b"answer-preview": "preview", b"answer-publication": "published"}


class SseClient(asyncio.Protocol):
    def __init__(self, on_frame: Callable[[str, str, float], None]) -> None:
        self.on_frame = on_frame
        self.buffer = b""
        self.status: int | None = None
        self.connected = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.frames = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buffer += data
        if self.status is None:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                return
            try:
                self.status = int(head.split(b" ", 2)[1])
            except (IndexError, ValueError):
                self.status = 0
            if not self.connected.done():
                self.connected.set_result(self.status)
            chunked = b"chunked" in head.lower()
            self.buffer = rest
            self.chunked = chunked
            if self.status != 200:
                if self.transport:
                    self.transport.close()
                return
        # Chunk-size lines are harmless to the frame scan: frames end with a blank line.
        while True:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                break
            frame, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            self._frame(frame, now)

    def _frame(self, frame: bytes, now: float) -> None:
        start = frame.find(b"event: ")
        if start < 0:
            return
        stop = frame.find(b"\n", start)
        name = frame[start + 7: stop if stop >= 0 else None].strip()
        kind = EVENTS.get(name)
        if kind is None:
            return
        self.frames += 1
        for match in set(MARKER.findall(frame)):
            self.on_frame(kind, match.decode(), now)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connected.done():
            self.connected.set_result(0)
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(host: str, port: int, run_id: str, token: str,
                  on_frame: Callable[[str, str, float], None], retry_for: float = 30.0) -> SseClient:
    """Open one stream; retried while Delivery does not know the run yet (404)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + retry_for
    request = (f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n").encode()
    while True:
        try:
            _, client = await loop.create_connection(lambda: SseClient(on_frame), host, port)
            assert client.transport is not None
            client.transport.write(request)
            status = await asyncio.wait_for(client.connected, 10)
            if status == 200:
                return client
            client.close()
        except (OSError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no SSE stream for {run_id}")
        await asyncio.sleep(0.3)

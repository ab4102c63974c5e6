"""D4/D5: an ASGI-level observer of SSE responses.

``delivery.completed`` is recorded only when the terminal frame (``event: done``)
went through ``send`` *and* the final ``http.response.body`` (``more_body`` false)
was sent without the client having disconnected first. A client that disconnects
earlier, or a stream the server had to drop, records ``delivery.interrupted``.
``delivery.sent`` says how many frames were written on the connection. Each is its
own fact on ``imprint.delivery.v1``; none stands in for another, and none of them is
a client receipt (those come from ``POST …/receipts``).

The endpoint announces a stream by filling the :class:`StreamTap` the observer put
in the scope; everything else (non-stream routes, 401/404) passes untouched."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.delivery import DeliveryCompleted, DeliveryInterrupted, DeliverySent
from services.common.observability import get_logger
from services.delivery.metrics import DeliveryMetrics

log = get_logger(__name__)

SCOPE_KEY = "imprint.delivery.stream"
_ID = re.compile(rb"^id: (\d+)$", re.MULTILINE)
_DONE = re.compile(rb"^event: done$", re.MULTILINE)


@dataclass
class StreamTap:
    run_id: str | None = None
    account_id: str | None = None
    connection_id: str | None = None
    resumed_from: int = 0
    status: int | None = None
    last_event_id: int = 0
    frames: int = 0
    terminal_sent: bool = False
    finished: bool = False
    disconnected: bool = False
    end_reason: str | None = None
    """Set by the stream: ``slow_client`` (dropped), ``nothing_more`` (resumed after the
    terminal), ``gone`` (the run was deleted)."""

    def outcome(self) -> str | None:
        """``completed`` | ``interrupted`` | ``None`` (no delivery fact to record)."""
        if self.run_id is None or self.status != 200:
            return None
        if self.terminal_sent and self.finished:
            return "completed"
        if self.finished and not self.disconnected and self.end_reason in ("nothing_more", "gone"):
            return None
        return "interrupted"


Publish = Callable[[Message], Awaitable[None]]
Record = Callable[[str, str], Awaitable[None]]


class DeliveryObserver:
    def __init__(self, app: Any, *, publish: Publish, record: Record, metrics: DeliveryMetrics) -> None:
        self.app = app
        self.publish = publish
        self.record = record
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tap = StreamTap()
        scope[SCOPE_KEY] = tap

        async def observed_receive() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect" and not tap.finished:
                tap.disconnected = True
            return message

        async def observed_send(message: Any) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                tap.status = message["status"]
            final = kind == "http.response.body" and not message.get("more_body", False)
            if final and tap.run_id is not None:
                # uvicorn drops writes after a disconnect without raising; give a pending
                # disconnect notice the chance to arrive before this counts as finished.
                await asyncio.sleep(0)
            await send(message)
            if kind != "http.response.body" or tap.run_id is None:
                return
            body: bytes = message.get("body", b"")
            if body and not tap.disconnected:
                ids = _ID.findall(body)
                if ids:
                    tap.frames += len(ids)
                    tap.last_event_id = int(ids[-1])
                if _DONE.search(body):
                    tap.terminal_sent = True
            if not message.get("more_body", False) and not tap.disconnected:
                tap.finished = True

        try:
            await self.app(scope, observed_receive, observed_send)
        finally:
            if tap.run_id is not None and tap.status == 200:
                await asyncio.shield(self._observe(tap))

    async def _observe(self, tap: StreamTap) -> None:
        outcome = tap.outcome()
        assert tap.run_id is not None and tap.account_id is not None and tap.connection_id is not None
        common = {"run_id": tap.run_id, "account_id": tap.account_id, "connection_id": tap.connection_id,
                  "last_event_id": tap.last_event_id}
        messages: list[Message] = []
        if tap.frames:
            messages.append(DeliverySent(**common, frame_count=tap.frames))
        if outcome == "completed":
            self.metrics.completions.inc()
            messages.append(DeliveryCompleted(**common, frame_count=tap.frames))
        elif outcome == "interrupted":
            self.metrics.interruptions.inc()
            messages.append(DeliveryInterrupted(**common))
        log.info("delivery observed", run_id=tap.run_id, connection_id=tap.connection_id, outcome=outcome,
                 frames=tap.frames, last_event_id=tap.last_event_id, resumed_from=tap.resumed_from,
                 end_reason=tap.end_reason)
        if outcome is not None:
            try:
                await self.record(tap.run_id, outcome)
            except Exception:  # the store being down must not turn into a second failure
                log.exception("could not record delivery outcome", run_id=tap.run_id)
        for message in messages:
            try:
                await self.publish(message)
            except Exception:
                self.metrics.publish_failures.labels(message.type).inc()
                log.exception("could not publish delivery observation", run_id=tap.run_id, type=message.type)

"""D4/D5: what Delivery records about a stream once its connection ended, and the
access log.

``delivery.completed`` is recorded only when the terminal frame (``done``) went out
*and* the final body was sent without the client having disconnected first. A
client that disconnects earlier, or a stream the server had to drop, records
``delivery.interrupted``. ``delivery.sent`` says how many frames were written on the
connection. Each is its own fact on ``imprint.delivery.v1``; none stands in for
another, and none of them is a client receipt (those come from ``POST …/receipts``).

The stream keeps its own :class:`~services.delivery.stream.DeliveryReport` as it
writes and hands it to :class:`DeliveryRecorder` when it ends — nothing here reads
the bytes of a response back.

:class:`AccessLog` logs every request as method, route path, status and duration —
never the query string (a stream ticket travels there, D6) nor any header."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from imprint.contracts.base import Message
from imprint.contracts.delivery import DeliveryCompleted, DeliveryInterrupted, DeliverySent
from services.common.observability import get_logger
from services.delivery.metrics import DeliveryMetrics
from services.delivery.stream import DeliveryReport

log = get_logger(__name__)

Publish = Callable[[Message], Awaitable[None]]
Record = Callable[[str, str], Awaitable[None]]
WriteOutcomes = Callable[[Mapping[str, str]], Awaitable[None]]
Item = TypeVar("Item")


class GroupCommit(Generic[Item]):
    """Writes what arrives while a write is under way together, in the next write — a group
    commit. Each caller returns only once its own item is stored (or raises the error of
    the write that carried it), so each keeps the guarantee one write per item would give.
    ``write`` takes the items in arrival order.

    A thousand clients of one run reporting at once cost a few transactions, not a
    thousand serialised on the store."""

    def __init__(self, write: Callable[[list[Item]], Awaitable[None]]) -> None:
        self.write = write
        self.waiting: list[Item] = []
        self.written: asyncio.Future[None] | None = None  # what the waiting items' write will settle
        self.drainer: asyncio.Task[None] | None = None  # the writes under way (held: an unreferenced task may be collected)

    async def __call__(self, item: Item) -> None:
        self.waiting.append(item)
        if self.written is None:
            self.written = asyncio.get_running_loop().create_future()
        written = self.written
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.get_running_loop().create_task(self._drain())
        await asyncio.shield(written)

    async def _drain(self) -> None:
        while self.waiting:
            items, written = self.waiting, self.written
            self.waiting, self.written = [], None
            assert written is not None
            try:
                await self.write(items)
            except Exception as error:  # every caller of this write hears it
                written.set_exception(error)
                written.exception()  # retrieved: the callers re-raise it, none is left unheard
            except BaseException:  # stopped mid-write: its callers are not left waiting
                written.cancel()
                raise
            else:
                written.set_result(None)


class GroupedOutcomes:
    """A :data:`Record` that writes the outcomes of streams ending together in one
    transaction (:class:`GroupCommit`); a run's ``completed`` wins over any ``interrupted``
    written beside it (it is sticky in the store as well)."""

    def __init__(self, write: WriteOutcomes) -> None:
        async def write_outcomes(items: list[tuple[str, str]]) -> None:
            outcomes: dict[str, str] = {}
            for run_id, outcome in items:
                if outcomes.get(run_id) != "completed":
                    outcomes[run_id] = outcome
            await write(outcomes)

        self.group: GroupCommit[tuple[str, str]] = GroupCommit(write_outcomes)

    async def __call__(self, run_id: str, outcome: str) -> None:
        await self.group((run_id, outcome))


class DeliveryRecorder:
    """Turns a finished stream's report into the delivery facts and the run's delivery state."""

    def __init__(self, *, publish: Publish, record: Record, metrics: DeliveryMetrics) -> None:
        self.publish = publish
        self.record = record
        self.metrics = metrics

    async def __call__(self, report: DeliveryReport) -> None:
        outcome = report.outcome()
        common = {"run_id": report.run_id, "account_id": report.account_id, "connection_id": report.connection_id,
                  "last_event_id": report.last_event_id}
        messages: list[Message] = []
        if report.frames:
            messages.append(DeliverySent(**common, frame_count=report.frames))
        if outcome == "completed":
            self.metrics.completions.inc()
            messages.append(DeliveryCompleted(**common, frame_count=report.frames))
        elif outcome == "interrupted":
            self.metrics.interruptions.inc()
            messages.append(DeliveryInterrupted(**common))
        log.info("delivery observed", run_id=report.run_id, connection_id=report.connection_id, outcome=outcome,
                 stream=report.stream, frames=report.frames, last_event_id=report.last_event_id,
                 resumed_from=report.resumed_from, reset=report.reset, end_reason=report.end_reason)
        if outcome is not None:
            try:
                await self.record(report.run_id, outcome)
            except Exception:  # the store being down must not turn into a second failure
                log.exception("could not record delivery outcome", run_id=report.run_id)
        for message in messages:
            try:
                await self.publish(message)
            except Exception:
                self.metrics.publish_failures.labels(message.type).inc()
                log.exception("could not publish delivery observation", run_id=report.run_id, type=message.type)


class AccessLog:
    """ASGI middleware: one log line and one counted request per HTTP request, by its
    route template (``/v1/runs/{run_id}/events``), never its query string."""

    def __init__(self, app: Any, *, metrics: DeliveryMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        def route() -> str:
            matched = scope.get("route")
            return getattr(matched, "path", None) or "unmatched"

        async def observed_send(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # counted as the response starts: a stream is counted while it is open
                self.metrics.requests.labels(scope["method"], route(), str(status)).inc()
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            if status == 0:
                self.metrics.requests.labels(scope["method"], route(), "0").inc()
            log.info("http request", method=scope["method"], route=route(), status=status,
                     duration_ms=round((time.monotonic() - started) * 1000, 1))

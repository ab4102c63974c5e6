"""Delivery's HTTP routes, one router per concern, over one :class:`Shared`.

* :mod:`.streams` — the SSE stream of a run and its stream tickets (D1/D2/D3/D6);
* :mod:`.ui_stream` — the same run as an AI SDK UI message stream;
* :mod:`.runs` — answer/execution snapshots, client receipts, cancel (D4/D5);
* :mod:`.conversations` — history and delete requests (D5/X8);
* :mod:`.notices` — a conversation's notices stream and its tickets (D7), also as AI SDK parts;
* :mod:`.conversation_stream` — a conversation's stream of turns and notices and its queue (D9);
* :mod:`.ops` — health, readiness, metrics and the reference web client.

Each module has ``router(ctx) -> APIRouter``; ``create_app`` includes them."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from imprint.contracts.base import Message
from imprint.delivery.execution import presentation
from services.common.settings import Settings
from services.delivery.auth import RateLimiter, StreamTickets
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import Notifier
from services.delivery.observer import DeliveryRecorder
from services.delivery.seen_store import ClientReport
from services.delivery.stream import DeliveryReport, ReportTo, StreamConfig
from services.delivery.view_store import RunRecord, ViewStore

Publish = Callable[[Message], Awaitable[None]]
AccountOf = Callable[..., Awaitable[str]]

NOT_FOUND = {404: {"description": "no such run for this account (a missing run and another account's run are the same, D6)"}}
UNAUTHORIZED = {401: {"description": "missing, invalid or expired bearer token (or stream ticket)"}}


@dataclass
class Shared:
    """What every router of one Delivery app shares."""

    settings: Settings
    store: ViewStore
    publish: Publish
    notifier: Notifier
    metrics: DeliveryMetrics
    config: StreamConfig
    limiter: RateLimiter
    tickets: StreamTickets
    recorder: DeliveryRecorder
    current_account: AccountOf
    """Bearer header only (every route)."""
    stream_account: AccountOf
    """Bearer header or a stream ticket for the path's run or conversation (stream routes)."""
    sightings: Callable[[ClientReport], Awaitable[None]]
    """Keeps what a client receipt says it rendered and received (D7), before the receipt is announced."""

    def owns(self, record: RunRecord | None, account: str) -> bool:
        return record is not None and record.account_id == account and not record.deleted

    async def owned_run(self, run_id: str, account: str) -> RunRecord:
        """D6: another account's run and a missing run are the same 404."""
        record = await asyncio.to_thread(self.store.run, run_id)
        if record is None or not self.owns(record, account):
            raise HTTPException(status_code=404, detail="run not found")
        return record

    async def awaited_run(self, run_id: str, account: str) -> RunRecord:
        """A stream may be opened just after its run was started, before Delivery heard
        of it: wait (at most ``stream_open_wait_seconds``) for the run to appear. A run
        that never appears, or is another account's, is 404 after the same wait, so
        the wait reveals nothing (D6)."""
        deadline = time.monotonic() + max(0.0, self.settings.stream_open_wait_seconds)
        if not self.notifier.bound:
            self.notifier.bind(asyncio.get_running_loop())
        while True:
            seen = self.notifier.version(run_id)
            record = await asyncio.to_thread(self.store.run, run_id)
            if self.owns(record, account):
                assert record is not None
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HTTPException(status_code=404, detail="run not found")
            await self.notifier.wait(run_id, seen, min(remaining, self.config.poll_interval))

    async def awaited_conversation(self, conversation_id: str, account: str) -> None:
        """A conversation's notices may be asked for before Delivery heard of its run: wait (at
        most ``stream_open_wait_seconds``) for one of the account's runs in it. A
        conversation that never appears, or is another account's, is 404 after the same
        wait as a run (D6)."""
        deadline = time.monotonic() + max(0.0, self.settings.stream_open_wait_seconds)
        if not self.notifier.bound:
            self.notifier.bind(asyncio.get_running_loop())
        while not await asyncio.to_thread(self.store.owns_conversation, conversation_id, account):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HTTPException(status_code=404, detail="conversation not found")
            await asyncio.sleep(min(remaining, self.config.poll_interval))

    def report_to(self, request: Request, run_id: str) -> ReportTo:
        """Where a stream's report goes when its connection ends: the recorder, and (for a
        stream opened with a ticket) the ticket, whose life that end extends."""
        ticket = getattr(request.state, "ticket", None)
        if ticket is None:
            return self.recorder

        async def record_and_touch(report: DeliveryReport) -> None:
            await asyncio.to_thread(self.tickets.touch, ticket, run_id)
            await self.recorder(report)

        return record_and_touch

    def execution(self, record: RunRecord) -> dict[str, Any]:
        return {
            "run_id": record.run_id, "conversation_id": record.conversation_id, "message_id": record.message_id,
            "state": record.state, "sequence": record.sequence, "reason": record.reason, "closed": record.closed,
            "last_event_id": record.last_frame_id, "terminal": record.terminal,
            **presentation(state=record.state, outcome=record.outcome, delivery=record.delivery,
                           closed=record.closed),
        }


def resume_position(request: Request, query: str | None, what: str) -> int:
    """The position a stream resumes after: the ``Last-Event-ID`` header (what a browser's
    ``EventSource`` sends on reconnect), else ``?last_event_id=``, else 0. Anything but a
    whole number ≥ 0 is a 400 naming ``what`` it must be (a frame id, a notice id)."""
    raw = request.headers.get("last-event-id") or query or "0"
    try:
        last = int(raw.strip())
    except ValueError:
        last = -1
    if last < 0:
        raise HTTPException(status_code=400, detail=f"Last-Event-ID must be a {what} id")
    return last


def rate_limited(ctx: Shared) -> Any:
    """A dependency: the bearer's account, within the per-account POST rate limit (429 beyond)."""
    Account = Annotated[str, Depends(ctx.current_account)]

    async def limited(request: Request, account: Account) -> str:
        allowed, retry_after = ctx.limiter.allow(account)
        if not allowed:
            raise HTTPException(status_code=429, detail="too many requests",
                                headers={"Retry-After": str(max(1, int(retry_after + 0.999)))})
        return account

    return limited

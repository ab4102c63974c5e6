"""``GET /v1/runs/{run_id}/events`` (imprint's SSE frames) and
``POST /v1/runs/{run_id}/stream-tickets`` (a header-free way to open it)."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from imprint.delivery.frames import reset_frame
from imprint.delivery.reset import NothingMore, Reset, resume
from services.delivery.routes import NOT_FOUND, UNAUTHORIZED, Shared, rate_limited, resume_position
from services.delivery.stream import DeliveryReport, EventStream

SSE_RESPONSE = {200: {"description": "the run's frames (`id`, `event`, `data`), ending after `done`. A "
                                     "Last-Event-ID beyond the run's last frame is answered with a `reset` frame "
                                     "(id 0: forget what you held) and then the whole current view from id 1 (D8)",
                      "content": {"text/event-stream": {}}},
                204: {"description": "the stream was read to its end (Last-Event-ID is its last frame): "
                                     "nothing more will come, do not reconnect"},
                **UNAUTHORIZED, **NOT_FOUND}


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["streams"])
    StreamAccount = Annotated[str, Depends(ctx.stream_account)]
    Limited = Annotated[str, Depends(rate_limited(ctx))]

    @api.get("/v1/runs/{run_id}/events", responses=SSE_RESPONSE, response_class=Response)
    async def events(run_id: str, request: Request, account: StreamAccount,
                     last_event_id: Annotated[str | None, Query(description="the last frame id held "
                                                                 "(the Last-Event-ID header wins)")] = None,
                     ticket: Annotated[str | None, Query(description="a stream ticket instead of the "
                                                         "Authorization header")] = None) -> Any:
        """A run's frames after ``Last-Event-ID`` (D1); waits a bounded time for a run
        Delivery has not heard of yet. A stream read to its end answers 204; an id the
        run cannot continue from starts over with ``reset`` (D8)."""
        last = resume_position(request, last_event_id, "frame")
        record = await ctx.awaited_run(run_id, account)
        start = resume(last, last_frame_id=record.last_frame_id, terminal=record.terminal)
        if isinstance(start, NothingMore):
            return Response(status_code=204)  # the HTML standard's way to stop an EventSource
        reset = start if isinstance(start, Reset) else None
        report = DeliveryReport(run_id=run_id, account_id=account, connection_id=uuid.uuid4().hex,
                                resumed_from=last, reset=reset.reason if reset else None)
        return EventStream(run_id=run_id, last_id=start.after, store=ctx.store, notifier=ctx.notifier,
                           config=ctx.config, metrics=ctx.metrics, report=report,
                           report_to=ctx.report_to(request, run_id),
                           reset=reset_frame(run_id, reset) if reset else None)

    @api.post("/v1/runs/{run_id}/stream-tickets", status_code=201, responses={**UNAUTHORIZED, **NOT_FOUND})
    async def stream_ticket(run_id: str, account: Limited) -> dict[str, Any]:
        """A short-lived ticket that opens this run's streams (``?ticket=``) without a
        header — for the browser's own ``EventSource``. Bound to the account and the
        run; it expires ``expires_in`` seconds after its last use, so the browser's
        reconnects keep working."""
        await ctx.awaited_run(run_id, account)
        ticket, ttl = await asyncio.to_thread(ctx.tickets.mint, account, run_id)
        ctx.metrics.tickets.inc()
        return {"ticket": ticket, "expires_in": ttl, "run_id": run_id,
                "events_url": f"/v1/runs/{run_id}/events?ticket={ticket}",
                "ui_stream_url": f"/v1/ai-sdk/runs/{run_id}/stream?ticket={ticket}"}

    return api

"""The AI SDK UI message stream of a run (``ai`` on npm, 5.x–7.x): what
``readUIMessageStream`` and ``useChat`` with ``DefaultChatTransport`` read, unmodified.

* ``GET /v1/ai-sdk/runs/{run_id}/stream`` — the run's whole assistant message from
  ``start`` (live until ``done``, then ``finish`` and ``[DONE]``). With
  ``DefaultChatTransport({api: "/v1/ai-sdk/runs"})`` and the run id as chat id this is
  the SDK's own resume request.
* ``GET /v1/ai-sdk/conversations/{conversation_id}/stream`` — the SDK's resume request
  with the conversation as chat id: the conversation's newest run if its stream is
  still open, else 204 (nothing active; the same for another account's conversation).

The client rebuilds the message from ``start``: it sends no offset, so every request
replays everything (:mod:`imprint.delivery.ui_message_stream`). A request that carries a
``Last-Event-ID`` the run cannot continue from (D8) is replayed the same way, with a
transient ``data-reset`` part after ``start``; any other id changes nothing."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from imprint.delivery.frames import reset_frame
from imprint.delivery.reset import Reset, resume
from imprint.delivery.ui_message_stream import UIMessageStream
from services.delivery.routes import NOT_FOUND, UNAUTHORIZED, Shared
from services.delivery.stream import DeliveryReport, EventStream, UIMessageParts
from services.delivery.view_store import RunRecord

UI_RESPONSE = {200: {"description": "UI message stream parts as SSE `data:` JSON, then `data: [DONE]`; "
                                    "header `x-vercel-ai-ui-message-stream: v1`",
                     "content": {"text/event-stream": {}}}, **UNAUTHORIZED}


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["ai-sdk"])
    StreamAccount = Annotated[str, Depends(ctx.stream_account)]
    Account = Annotated[str, Depends(ctx.current_account)]

    def stream(record: RunRecord, account: str, request: Request) -> EventStream:
        reset = held_beyond(record, request)
        report = DeliveryReport(run_id=record.run_id, account_id=account, connection_id=uuid.uuid4().hex,
                                stream="ui-message", resumed_from=reset.last_event_id if reset else 0,
                                reset=reset.reason if reset else None)
        mapping = UIMessageStream(run_id=record.run_id, conversation_id=record.conversation_id)
        return EventStream(run_id=record.run_id, last_id=0, store=ctx.store, notifier=ctx.notifier,
                           config=ctx.config, metrics=ctx.metrics, report=report,
                           report_to=ctx.report_to(request, record.run_id),
                           form=UIMessageParts(mapping), reset=reset_frame(record.run_id, reset) if reset else None)

    @api.get("/v1/ai-sdk/runs/{run_id}/stream", responses={**UI_RESPONSE, **NOT_FOUND}, response_class=Response)
    async def run_stream(run_id: str, request: Request, account: StreamAccount,
                         ticket: Annotated[str | None, Query(description="a stream ticket instead of the "
                                                             "Authorization header")] = None) -> Any:
        """The run as one assistant UI message, replayed from ``start``."""
        return stream(await ctx.awaited_run(run_id, account), account, request)

    @api.get("/v1/ai-sdk/conversations/{conversation_id}/stream",
             responses={**UI_RESPONSE, 204: {"description": "no run of this conversation is streaming"}},
             response_class=Response)
    async def conversation_stream(conversation_id: str, request: Request, account: Account) -> Any:
        """The SDK's resume request for a chat: its newest run while that run's stream is open."""
        records = await asyncio.to_thread(ctx.store.history, conversation_id)
        active = [r for r in records if ctx.owns(r, account) and not r.terminal]
        if not active:
            return Response(status_code=204)
        return stream(active[-1], account, request)

    return api


def held_beyond(record: RunRecord, request: Request) -> Reset | None:
    """D8 on a stream that always starts from ``start``: only an id the run cannot continue
    from matters (a reset to tell the client about); a valid id or none, or a header that
    is no frame id at all, is replayed as ever."""
    raw = request.headers.get("last-event-id", "").strip()
    if not raw.isascii() or not raw.isdigit():
        return None
    start = resume(int(raw), last_frame_id=record.last_frame_id, terminal=record.terminal)
    return start if isinstance(start, Reset) else None

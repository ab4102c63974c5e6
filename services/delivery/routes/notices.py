"""D7: a conversation's notices — withdrawals of blocks in runs that already ended.

* ``GET /v1/conversations/{conversation_id}/notices`` — SSE, one ``notice`` event per
  notice, ``id`` its id in the conversation; ``Last-Event-ID`` (or ``?last_event_id=``)
  resumes after it with no gap and no repeat; an id beyond the conversation's last notice
  starts over with a ``reset`` (id 0) and every notice from 1 (D8). It never ends by
  itself: keep-alive comments while quiet; it ends when the conversation is deleted.
* ``GET /v1/ai-sdk/conversations/{conversation_id}/notices`` — the same notices as AI SDK
  ``data-block`` parts (:func:`imprint.delivery.ui_message_stream.notice_part`), for a
  front end on the ``ai`` package (``DefaultChatTransport.reconnectToStream`` with this
  URL from ``prepareReconnectToStreamRequest``), resumed the same way.
* ``POST /v1/conversations/{conversation_id}/stream-tickets`` — a ticket that opens the
  conversation's streams (these two, and its conversation stream, D9) and nothing else
  (``?ticket=``), for the browser's own ``EventSource``.

Isolation is D6's: only the conversation's account reads it; another account's
conversation, and one Delivery never heard of, answer 404 after the same bounded wait as
a run. A client acknowledges a notice like any receipt: ``POST
/v1/runs/{notice.run_id}/receipts`` with ``type: client.received`` and ``notice_ids``."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from imprint.delivery.feeds import notice_feed
from imprint.delivery.frames import RESET, Frame
from imprint.delivery.reset import Reset, resume
from services.common.observability import get_logger
from services.delivery.notices import NOTICES, NoticeFeeds
from services.delivery.routes import UNAUTHORIZED, Shared, rate_limited, resume_position
from services.delivery.stream import DeliveryReport, EventStream, SSEFrames, StreamFormat, UINoticeParts

log = get_logger(__name__)

NOT_FOUND = {404: {"description": "no such conversation for this account (a missing conversation and another "
                                  "account's are the same, D6)"}}
NOTICES_RESPONSE = {200: {"description": "the conversation's notices (`id`, `event: notice`, `data`), live; a "
                                         "Last-Event-ID beyond its last notice gets a `reset` (id 0) and every notice "
                                         "from 1", "content": {"text/event-stream": {}}},
                    **UNAUTHORIZED, **NOT_FOUND}


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["notices"])
    Limited = Annotated[str, Depends(rate_limited(ctx))]
    feed_routes(api, ctx, lambda: ctx.store.notices, "notices", "notice", NOTICES_RESPONSE,
                FeedRoute("notices_stream", "notices",
                          "The conversation's notices after ``Last-Event-ID`` (D7), then live."),
                FeedRoute("ui_notices_stream", "ui-notices", "The same notices as AI SDK ``data-block`` parts "
                          "(header ``x-vercel-ai-ui-message-stream: v1``).", lambda _conversation_id: UINoticeParts()))

    @api.post("/v1/conversations/{conversation_id}/stream-tickets", status_code=201,
              responses={**UNAUTHORIZED, **NOT_FOUND})
    async def notices_ticket(conversation_id: str, account: Limited) -> dict[str, Any]:
        """A short-lived ticket that opens this conversation's streams — its notices, its
        conversation stream (``?ticket=``)
        without a header; it expires ``expires_in`` seconds after its last use."""
        await ctx.awaited_conversation(conversation_id, account)
        ticket, ttl = await asyncio.to_thread(ctx.tickets.mint, account, notice_feed(conversation_id))
        ctx.metrics.tickets.inc()
        return {"ticket": ticket, "expires_in": ttl, "conversation_id": conversation_id,
                "notices_url": f"/v1/conversations/{conversation_id}/notices?ticket={ticket}",
                "ui_notices_url": f"/v1/ai-sdk/conversations/{conversation_id}/notices?ticket={ticket}",
                "events_url": f"/v1/conversations/{conversation_id}/events?ticket={ticket}",
                "ui_events_url": f"/v1/ai-sdk/conversations/{conversation_id}/events?ticket={ticket}"}

    return api


@dataclass(frozen=True, slots=True)
class FeedRoute:
    """One GET route of a conversation's feed: its operation name (the OpenAPI operation id and
    summary come from it), the stream's name in logs, its description and its wire form."""

    name: str
    stream: str
    description: str
    form: Callable[[str], StreamFormat] = lambda _conversation_id: SSEFrames()
    """The form of the stream, made per request from the conversation id."""


def feed_routes(api: APIRouter, ctx: Shared, source: Callable[[], NoticeFeeds], feed: str, entry: str,
                responses: dict[int | str, dict[str, Any]], sse: FeedRoute, ui: FeedRoute) -> None:
    """The two GET routes of the conversation feed ``source()`` (its notices, D7; its stream,
    D9): ``/v1/conversations/{conversation_id}/<feed>`` in imprint's SSE and the same under
    ``/v1/ai-sdk/`` in the AI SDK's form, both through :func:`feed_stream` with the same
    parameters and refusals; ``entry`` names what an id counts in ``last_event_id``."""
    StreamAccount = Annotated[str, Depends(ctx.stream_account)]
    LastEventId = Annotated[str | None, Query(description=f"the last {entry} id held (the Last-Event-ID header wins)")]
    Ticket = Annotated[str | None, Query(description="a stream ticket instead of the Authorization header")]

    def add(route: FeedRoute, prefix: str, tags: list[str] | None) -> None:
        async def endpoint(conversation_id: str, request: Request, account: StreamAccount,
                           last_event_id: LastEventId = None, ticket: Ticket = None) -> Any:
            return await feed_stream(ctx, source(), conversation_id, account, request, last_event_id,
                                     route.form(conversation_id), route.stream)

        api.add_api_route(f"{prefix}/conversations/{{conversation_id}}/{feed}", endpoint, methods=["GET"],
                          name=route.name, description=route.description, responses=responses,
                          response_class=Response, tags=tags)

    add(sse, "/v1", None)
    add(ui, "/v1/ai-sdk", ["ai-sdk"])


async def feed_stream(ctx: Shared, source: NoticeFeeds, conversation_id: str, account: str, request: Request,
                      query_id: str | None, form: StreamFormat, stream: str) -> EventStream:
    """One of a conversation's feeds (its notices, D7; its stream, D9) after the position the
    request holds, then live: 404 after the same wait for another account's conversation (D6);
    an id beyond the feed's last starts over with a ``reset`` (D8)."""
    last = resume_position(request, query_id, "notice" if source.kind is NOTICES else "entry")
    await ctx.awaited_conversation(conversation_id, account)
    feed = source.kind.key(conversation_id)
    head = await asyncio.to_thread(source.run, feed)
    start = resume(last, last_frame_id=head.last_frame_id, terminal=False)  # a conversation's feed has no end
    reset = start if isinstance(start, Reset) else None
    report = DeliveryReport(run_id=conversation_id, account_id=account, connection_id=uuid.uuid4().hex,
                            resumed_from=last, stream=stream, reset=reset.reason if reset else None)
    ticket = getattr(request.state, "ticket", None)

    async def ended(report: DeliveryReport) -> None:
        # No delivery fact: those are a run's (D4). A ticket's use extends its life.
        if ticket is not None:
            await asyncio.to_thread(ctx.tickets.touch, ticket, notice_feed(conversation_id))
        log.info("conversation feed ended", conversation_id=conversation_id, stream=stream, entries=report.frames,
                 last_event_id=report.last_event_id, resumed_from=last, reset=report.reset)

    return EventStream(run_id=feed, last_id=start.after, store=source, notifier=ctx.notifier,
                       config=ctx.config, metrics=ctx.metrics, report=report, report_to=ended, form=form,
                       reset=Frame(feed, reset.after, RESET, reset.payload(), "") if reset else None)

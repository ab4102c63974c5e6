"""D9: a conversation's stream and its queue.

* ``GET /v1/conversations/{conversation_id}/events`` — SSE, one entry per event: ``turn``
  (a question's place in the conversation: its run, state, policy, reason, what it waits
  behind) and ``notice`` (a D7 notice of one of its runs), ``id`` the entry's id in the
  conversation. ``Last-Event-ID`` (or ``?last_event_id=``) resumes after it with no gap and
  no repeat; an id beyond the last entry starts over with a ``reset`` (D8). It never ends by
  itself; it ends when the conversation is deleted. Every tab folds the same entries
  (:func:`imprint.delivery.conversation.fold`) and shows the same questions and queue.
* ``GET /v1/ai-sdk/conversations/{conversation_id}/events`` — the same entries as one AI SDK
  message of the conversation's own (``data-turn`` parts replaced in place by run id,
  ``data-notice`` parts), resumed the same way.
* ``POST /v1/conversations/{conversation_id}/queue/{run_id}/cancel`` — cancel a question
  still waiting for its turn; ``…/send-now`` — start it now, interrupting the live run at a
  commit boundary (X11). Each publishes the user's control message for the Journal, which
  records it as a fact. A question that has started (or ended) is refused with 409 and a
  typed body (:class:`QueueRefusal`); the Journal refuses one that started meanwhile the
  same way, and its refusal is a ``turn`` of the stream.

Isolation is D6's: the conversation's account only; another account's conversation and one
Delivery never heard of answer 404 after the same bounded wait as a run. The streams open
with the conversation's stream ticket (``POST …/stream-tickets``)."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from imprint.contracts.conversation import QuestionCancelRequested, QuestionSendNowRequested
from services.common.observability import get_logger
from services.delivery.routes import UNAUTHORIZED, Shared, rate_limited
from services.delivery.routes.notices import NOT_FOUND, FeedRoute, feed_routes
from services.delivery.stream_formats import UIConversationParts

log = get_logger(__name__)

EVENTS_RESPONSE = {200: {"description": "the conversation's entries (`id`, `event: turn|notice`, `data`), live; "
                                        "a Last-Event-ID beyond its last entry gets a `reset` (id 0) and every "
                                        "entry from 1", "content": {"text/event-stream": {}}},
                   **UNAUTHORIZED, **NOT_FOUND}


class QueueRefusal(BaseModel):
    """Why a queue action was refused: the question is no longer waiting."""

    error: Literal["question_started", "question_unknown"]
    """``question_started``: it started or ended (``state`` says which); ``question_unknown``:
    no question of this conversation has that run id."""
    run_id: str
    state: str | None = None
    detail: str


class QueueAccepted(BaseModel):
    """The user's request was published for the Journal to record."""

    requested: Literal["cancel", "send_now"]
    run_id: str
    event_id: str


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["conversations"])
    feed_routes(api, ctx, lambda: ctx.store.conversations, "events", "entry", EVENTS_RESPONSE,
                FeedRoute("conversation_events", "conversation",
                          "The conversation stream after ``Last-Event-ID`` (D9), then live."),
                FeedRoute("ui_conversation_events", "ui-conversation",
                          "The conversation stream as one AI SDK message: ``data-turn`` and ``data-notice`` parts.",
                          UIConversationParts))

    async def queued(conversation_id: str, run_id: str, account: str) -> JSONResponse | None:
        """A 409 unless ``run_id`` is a question of the conversation still waiting for its turn."""
        await ctx.awaited_conversation(conversation_id, account)
        view = await asyncio.to_thread(ctx.store.conversation_view, conversation_id)
        question = view.question(run_id)
        if question is None:
            refusal = QueueRefusal(error="question_unknown", run_id=run_id,
                                   detail="no question of this conversation has this run id")
        elif run_id not in view.queue:
            refusal = QueueRefusal(error="question_started", run_id=run_id, state=question.kind or question.state,
                                   detail="the question is no longer waiting for its turn")
        else:
            return None
        return JSONResponse(status_code=409, content=refusal.model_dump())

    Limited = Annotated[str, Depends(rate_limited(ctx))]
    refused = {409: {"model": QueueRefusal, "description": "the question is not waiting (it started or ended)"},
               **UNAUTHORIZED, **NOT_FOUND}

    def queue_route(name: str, action: str, requested: Literal["cancel", "send_now"],
                    request: type[QuestionCancelRequested | QuestionSendNowRequested], description: str) -> None:
        """``POST …/queue/{run_id}/<action>``: refused with 409 unless the question still waits
        (:func:`queued`), else the user's request is published for the Journal to record."""

        async def endpoint(conversation_id: str, run_id: str, account: Limited) -> Any:
            refusal = await queued(conversation_id, run_id, account)
            if refusal is not None:
                return refusal
            message = request(conversation_id=conversation_id, run_id=run_id, account_id=account)
            await ctx.publish(message)
            log.info(f"queued question {action} requested", conversation_id=conversation_id, run_id=run_id)
            return QueueAccepted(requested=requested, run_id=run_id, event_id=str(message.event_id))

        api.add_api_route(f"/v1/conversations/{{conversation_id}}/queue/{{run_id}}/{action}", endpoint,
                          methods=["POST"], name=name, description=description, status_code=202,
                          response_model=QueueAccepted, responses=refused)

    queue_route("cancel_queued", "cancel", "cancel", QuestionCancelRequested,
                "Cancel a question still waiting for its turn (the Journal records it; the\n"
                "conversation stream shows it ``cancelled``).")
    queue_route("send_now", "send-now", "send_now", QuestionSendNowRequested,
                "Start a waiting question now: the live run is stopped at a commit boundary (X11),\n"
                "its committed blocks stay, and this question follows.")
    return api

"""Delivery HTTP (SPEC §2): SSE streams, answer/execution/history snapshots, client
receipts, cancel and delete requests, health, metrics and the reference web client.

``create_app(settings, store, publish)``: ``publish`` sends a contract message to its
topic (see :func:`topic_for`); the Kafka consumer that feeds ``store.process()`` pokes
``app.state.notifier`` with the run ids that got frames."""

# No "from __future__ import annotations": FastAPI must see the local Annotated dependencies.
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from imprint.contracts.base import Message
from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested
from imprint.contracts.delivery import ClientConflict, ClientReceived, ClientRendered
from imprint.contracts.topics import Topic
from imprint.delivery.execution import presentation
from services.common.observability import get_logger
from services.common.settings import Settings
from services.delivery.auth import RateLimiter, RequestSizeLimit, account_dependency
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import Notifier
from services.delivery.observer import SCOPE_KEY, DeliveryObserver, StreamTap
from services.delivery.operator import operator_router
from services.delivery.stream import EventStream, StreamConfig
from services.delivery.view_store import RunRecord, ViewStore

log = get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
Publish = Callable[[Message], Awaitable[None]]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

_TOPIC_OF_TYPE = {
    "delivery.sent": Topic.DELIVERY, "delivery.interrupted": Topic.DELIVERY, "delivery.completed": Topic.DELIVERY,
    "client.received": Topic.DELIVERY, "client.rendered": Topic.DELIVERY, "client.conflict": Topic.DELIVERY,
    "run.cancel_requested": Topic.CONTROL, "conversation.delete_requested": Topic.CONTROL,
}


def topic_for(message: Message) -> Topic:
    """The contract topic of a message Delivery produces."""
    return _TOPIC_OF_TYPE[message.type]


ShortId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]


class ReceiptIn(BaseModel):
    """``POST /v1/runs/{run_id}/receipts``: what the client observed (D4)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["client.received", "client.rendered", "client.conflict"]
    last_event_id: int = Field(0, ge=0)
    block_ids: list[ShortId] = Field(default_factory=list, max_length=500)
    detail: str = Field("", max_length=2000)
    event_id: uuid.UUID | None = None
    """The client's idempotency key for a retried receipt."""


def create_app(
    settings: Settings,
    store: ViewStore,
    publish: Publish,
    *,
    notifier: Notifier | None = None,
    caught_up: Callable[[], bool] | None = None,
    metrics: DeliveryMetrics | None = None,
    poll_interval: float = 1.0,
    slow_client_timeout: float = 30.0,
    rate_limit: tuple[int, float] = (300, 60.0),
) -> FastAPI:
    """The Delivery app. Optional: ``notifier`` (else a new one, at
    ``app.state.notifier``), ``caught_up`` (the consumer's readiness for ``/readyz``;
    default always true), ``metrics``, the poll fallback of idle streams, the slow
    client timeout and the per-account POST rate limit (requests, seconds)."""
    notifier = notifier or Notifier()
    metrics = metrics or DeliveryMetrics()
    store.listeners.append(lambda _conflict: metrics.conflicts.inc())
    config = StreamConfig(keepalive=settings.sse_keepalive_seconds, queue_size=settings.sse_client_queue,
                          slow_client_timeout=slow_client_timeout, poll_interval=poll_interval)
    limiter = RateLimiter(rate=rate_limit[0], per=rate_limit[1])
    current_account = account_dependency(settings)
    Account = Annotated[str, Depends(current_account)]

    api = FastAPI(title="imprint delivery", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    api.state.notifier = notifier
    api.state.store = store
    api.state.metrics = metrics
    api.state.caught_up = caught_up or (lambda: True)

    async def owned_run(run_id: str, account: str) -> RunRecord:
        """D6: another account's run and a missing run are the same 404."""
        record = await asyncio.to_thread(store.run, run_id)
        if record is None or record.account_id != account or record.deleted:
            raise HTTPException(status_code=404, detail="run not found")
        return record

    async def rate_limited(request: Request, account: Account) -> str:
        allowed, retry_after = limiter.allow(account)
        if not allowed:
            raise HTTPException(status_code=429, detail="too many requests",
                                headers={"Retry-After": str(max(1, int(retry_after + 0.999)))})
        return account

    Limited = Annotated[str, Depends(rate_limited)]

    def execution(record: RunRecord) -> dict[str, Any]:
        return {
            "run_id": record.run_id, "conversation_id": record.conversation_id, "message_id": record.message_id,
            "state": record.state, "sequence": record.sequence, "reason": record.reason, "closed": record.closed,
            "last_event_id": record.last_frame_id, "terminal": record.terminal,
            **presentation(state=record.state, outcome=record.outcome, delivery=record.delivery,
                           closed=record.closed),
        }

    @api.get("/v1/runs/{run_id}/events")
    async def events(run_id: str, request: Request, account: Account,
                     last_event_id: Annotated[str | None, Query()] = None) -> Any:
        await owned_run(run_id, account)
        raw = request.headers.get("last-event-id") or last_event_id or "0"
        try:
            last = int(raw.strip())
        except ValueError:
            raise HTTPException(status_code=400, detail="Last-Event-ID must be a frame id") from None
        if last < 0:
            raise HTTPException(status_code=400, detail="Last-Event-ID must be a frame id")
        tap: StreamTap = request.scope.get(SCOPE_KEY) or StreamTap()
        tap.run_id, tap.account_id, tap.resumed_from = run_id, account, last
        tap.connection_id = uuid.uuid4().hex
        if not notifier.bound:
            notifier.bind(asyncio.get_running_loop())
        return EventStream(run_id=run_id, last_id=last, store=store, notifier=notifier, config=config,
                           metrics=metrics, tap=tap)

    @api.get("/v1/runs/{run_id}/answer")
    async def answer(run_id: str, account: Account) -> dict[str, Any]:
        record = await owned_run(run_id, account)
        view = await asyncio.to_thread(store.answer_view, run_id) or {"blocks": [], "conflicts": []}
        return {"run_id": run_id, **view, **{k: v for k, v in execution(record).items() if k != "run_id"}}

    @api.get("/v1/runs/{run_id}")
    async def run(run_id: str, account: Account) -> dict[str, Any]:
        return execution(await owned_run(run_id, account))

    @api.post("/v1/runs/{run_id}/receipts", status_code=202)
    async def receipts(run_id: str, body: ReceiptIn, account: Limited) -> dict[str, Any]:
        record = await owned_run(run_id, account)
        if body.last_event_id > record.last_frame_id:
            raise HTTPException(status_code=422, detail="last_event_id names a frame that was never sent")
        kind = {"client.received": ClientReceived, "client.rendered": ClientRendered,
                "client.conflict": ClientConflict}[body.type]
        fields: dict[str, Any] = {"run_id": run_id, "account_id": account, "last_event_id": body.last_event_id,
                                  "block_ids": body.block_ids}
        if body.event_id is not None:
            fields["event_id"] = body.event_id
        if kind is ClientConflict:
            fields["detail"] = body.detail
        message = kind(**fields)
        await publish(message)
        metrics.receipts.labels(body.type).inc()
        return {"accepted": body.type, "event_id": str(message.event_id)}

    @api.post("/v1/runs/{run_id}/cancel", status_code=202)
    async def cancel(run_id: str, account: Limited) -> dict[str, Any]:
        record = await owned_run(run_id, account)
        if record.terminal:
            raise HTTPException(status_code=409, detail="run already finished")
        message = RunCancelRequested(run_id=run_id, account_id=account)
        await publish(message)
        log.info("cancel requested", run_id=run_id)
        return {"cancel_requested": True, "event_id": str(message.event_id)}

    async def owned_conversation(conversation_id: str, account: str) -> list[RunRecord]:
        records = await asyncio.to_thread(store.history, conversation_id)
        mine = [r for r in records if r.account_id == account and not r.deleted]
        if not mine:
            raise HTTPException(status_code=404, detail="conversation not found")
        return mine

    @api.get("/v1/conversations/{conversation_id}/history")
    async def history(conversation_id: str, account: Account) -> dict[str, Any]:
        runs = []
        for record in await owned_conversation(conversation_id, account):
            view = await asyncio.to_thread(store.answer_view, record.run_id) or {"blocks": [], "conflicts": []}
            entry = execution(record)
            entry["blocks"] = view["blocks"]
            # D5: the closed answer text is shown only once its delivery completed.
            entry["answer_text"] = (await asyncio.to_thread(store.answer_text, record.run_id)
                                    if entry["complete"] else None)
            runs.append(entry)
        return {"conversation_id": conversation_id, "runs": runs}

    @api.delete("/v1/conversations/{conversation_id}", status_code=202)
    async def delete_conversation(conversation_id: str, account: Limited) -> dict[str, Any]:
        await owned_conversation(conversation_id, account)
        message = ConversationDeleteRequested(conversation_id=conversation_id, account_id=account, reason="user")
        await publish(message)
        log.info("conversation delete requested", conversation_id=conversation_id)
        return {"delete_requested": True, "event_id": str(message.event_id)}

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz() -> Response:
        try:
            reachable = await asyncio.wait_for(asyncio.to_thread(store.ping), 5.0)
        except Exception:
            reachable = False
        ready = bool(reachable) and bool(api.state.caught_up())
        return JSONResponse({"ready": ready, "store": reachable, "caught_up": bool(api.state.caught_up())},
                            status_code=200 if ready else 503)

    @api.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @api.get("/")
    async def index() -> Response:
        return FileResponse(STATIC / "index.html", headers={"Content-Security-Policy": CSP,
                                                            "Cache-Control": "no-cache"})

    api.include_router(operator_router(settings, store))
    api.mount("/static", StaticFiles(directory=STATIC), name="static")

    async def record(run_id: str, outcome: str) -> None:
        await asyncio.to_thread(store.record_delivery, run_id, outcome)

    # Outermost first on the way in: size limit, then the D4/D5 observer, then FastAPI.
    api.add_middleware(DeliveryObserver, publish=publish, record=record, metrics=metrics)
    api.add_middleware(RequestSizeLimit, limit=settings.max_request_bytes)
    return api

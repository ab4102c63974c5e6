"""Delivery HTTP (SPEC §2): SSE streams, the AI SDK UI message stream, answer /
execution / history snapshots, client receipts, cancel and delete requests, a
conversation's notices (D7), health,
metrics, the OpenAPI document (``/openapi.json``) and the reference web client.

``create_app(settings, store, publish)``: ``publish`` sends a contract message to its
topic (the contract's own map, :func:`imprint.contracts.registry.topic_of`); the Kafka
consumer that feeds ``store.commit()`` hands ``app.state.notifier`` the feeds that changed
and the frames it committed. The routes live in
:mod:`services.delivery.routes`, one router per concern."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from imprint.contracts.base import Message
from services.common.settings import Settings
from services.delivery.auth import (
    RateLimiter,
    RequestSizeLimit,
    StreamTickets,
    account_dependency,
    stream_account_dependency,
)
from services.delivery.cors import AllowListedOrigins
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import Notifier
from services.delivery.observer import AccessLog, DeliveryRecorder, GroupCommit, GroupedOutcomes
from services.delivery.operator import operator_router
from services.delivery.routes import (
    Shared, conversation_stream, conversations, notices, ops, runs, streams, ui_stream,
)
from services.delivery.routes.ops import STATIC
from services.delivery.seen_store import ClientReport
from services.delivery.stream import StreamConfig
from services.delivery.view_store import ViewStore

Publish = Callable[[Message], Awaitable[None]]

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

    async def write(outcomes: Mapping[str, str]) -> None:
        await asyncio.to_thread(store.record_deliveries, dict(outcomes))

    record = GroupedOutcomes(write)

    async def keep(reports: list[ClientReport]) -> None:
        await asyncio.to_thread(store.sightings.record, reports)

    tickets = StreamTickets(store, ttl=settings.stream_ticket_ttl_seconds)
    ctx = Shared(
        settings=settings, store=store, publish=publish, notifier=notifier, metrics=metrics,
        config=StreamConfig(keepalive=settings.sse_keepalive_seconds, queue_size=settings.sse_client_queue,
                            slow_client_timeout=slow_client_timeout, poll_interval=poll_interval),
        limiter=RateLimiter(rate=rate_limit[0], per=rate_limit[1]),
        tickets=tickets,
        recorder=DeliveryRecorder(publish=publish, record=record, metrics=metrics),
        current_account=account_dependency(settings),
        stream_account=stream_account_dependency(settings, tickets),
        sightings=GroupCommit(keep),
    )

    api = FastAPI(title="imprint delivery", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json",
                  # FastAPI's own telemetry follows the global provider tracing installs: its request
                  # spans carry the query string (a stream ticket) and its logs exception messages (X9).
                  telemetry={"tracing": False, "operation_spans": False, "metrics": False, "logs": False},
                  description="Delivery's HTTP API: a run's SSE frames, its AI SDK UI message stream, "
                              "answer and history snapshots, client receipts, cancel and delete requests. "
                              "Every /v1 route takes `Authorization: Bearer <token>`; the stream routes "
                              "also take a stream ticket (`?ticket=`).")
    api.state.notifier = notifier
    api.state.store = store
    api.state.metrics = metrics
    api.state.caught_up = caught_up or (lambda: True)
    api.state.context = ctx

    api.include_router(streams.router(ctx))
    api.include_router(ui_stream.router(ctx))
    api.include_router(runs.router(ctx))
    api.include_router(conversations.router(ctx))
    api.include_router(notices.router(ctx))
    api.include_router(conversation_stream.router(ctx))
    api.include_router(ops.router(ctx))
    api.include_router(operator_router(settings, store))
    api.mount("/static", StaticFiles(directory=STATIC), name="static")

    # Outermost first on the way in: access log, then CORS (only with IMPRINT_CORS_ORIGINS, so a
    # refusal of the size limit still carries its grant), then the size limit, then FastAPI.
    api.add_middleware(RequestSizeLimit, limit=settings.max_request_bytes)
    if settings.cors_origins:
        api.add_middleware(AllowListedOrigins, origins=settings.cors_origins)
    api.add_middleware(AccessLog, metrics=metrics)
    return api

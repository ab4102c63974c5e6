"""Health, readiness, Prometheus metrics and the reference web client."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.common.evolution import METRICS as intake_metrics
from services.delivery.routes import Shared

STATIC = Path(__file__).resolve().parent.parent / "static"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
"""What a page Delivery serves may load and do: its own scripts, styles and API, nothing else."""


def page(name: str) -> FileResponse:
    """One of Delivery's pages (the reference client, the operator's inspector), under :data:`CSP`,
    revalidated on every load."""
    return FileResponse(STATIC / name, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["operations"])

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz")
    async def readyz(request: Request) -> Response:
        """Ready when the store answers and the consumer caught up (``app.state.caught_up``)."""
        caught_up = request.app.state.caught_up
        try:
            reachable = await asyncio.wait_for(asyncio.to_thread(ctx.store.ping), 5.0)
        except Exception:
            reachable = False
        ready = bool(reachable) and bool(caught_up())
        return JSONResponse({"ready": ready, "store": reachable, "caught_up": bool(caught_up())},
                            status_code=200 if ready else 503)

    @api.get("/metrics")
    async def prometheus() -> Response:
        """Delivery's own metrics, then the process's intake metrics (R8's unknown fields)."""
        body = generate_latest(ctx.metrics.registry) + generate_latest(intake_metrics)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @api.get("/", include_in_schema=False)
    async def index() -> Response:
        return page("index.html")

    return api

"""A run's snapshots (answer view, execution state, D5), client receipts (D4; what D7's
"who saw it" report keeps of them) and cancel (D2: only this stops a run; a dropped
connection never does; X11: its answer names the committed block revisions the user keeps)."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.delivery import ClientConflict, ClientReceived, ClientRendered
from services.common.observability import get_logger
from services.delivery.routes import NOT_FOUND, UNAUTHORIZED, Shared, rate_limited
from services.delivery.seen_store import ClientReport

log = get_logger(__name__)

ShortId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
Revision = Annotated[int, Field(ge=1)]
NoticeId = Annotated[int, Field(ge=1)]


class ReceiptIn(BaseModel):
    """``POST /v1/runs/{run_id}/receipts``: what the client observed (D4), and who it is (D7)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["client.received", "client.rendered", "client.conflict"]
    last_event_id: int = Field(0, ge=0)
    block_ids: list[ShortId] = Field(default_factory=list, max_length=500)
    detail: str = Field("", max_length=2000)
    event_id: uuid.UUID | None = None
    """The client's idempotency key for a retried receipt."""
    client_id: ShortId | None = None
    """The same on every receipt of one client (the reference page: one per page load): what
    it rendered and which withdrawals it received are told apart from other clients' (D7)."""
    revisions: dict[ShortId, Revision] = Field(default_factory=dict, max_length=500)
    """block id → the revision the client shows (a block named in ``block_ids`` only: not said)."""
    notice_ids: list[NoticeId] = Field(default_factory=list, max_length=500)
    """``client.received`` only: notices of this run (from its conversation's notices stream) received."""


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["runs"], responses={**UNAUTHORIZED, **NOT_FOUND})
    Account = Annotated[str, Depends(ctx.current_account)]
    Limited = Annotated[str, Depends(rate_limited(ctx))]
    store = ctx.store

    @api.get("/v1/runs/{run_id}/answer")
    async def answer(run_id: str, account: Account) -> dict[str, Any]:
        """The run's current answer view (blocks in ordinal order) and execution state."""
        record = await ctx.owned_run(run_id, account)
        view = await asyncio.to_thread(store.answer_view, run_id) or {"blocks": [], "conflicts": []}
        return {"run_id": run_id, **view, **{k: v for k, v in ctx.execution(record).items() if k != "run_id"}}

    @api.get("/v1/runs/{run_id}")
    async def run(run_id: str, account: Account) -> dict[str, Any]:
        """The run's execution state as a refresh presents it (D5)."""
        return ctx.execution(await ctx.owned_run(run_id, account))

    @api.post("/v1/runs/{run_id}/receipts", status_code=202)
    async def receipts(run_id: str, body: ReceiptIn, account: Limited) -> dict[str, Any]:
        """A client receipt: what the client received, rendered or found conflicting (D4)."""
        record = await ctx.owned_run(run_id, account)
        if body.last_event_id > record.last_frame_id:
            raise HTTPException(status_code=422, detail="last_event_id names a frame that was never sent")
        if body.notice_ids and body.type != "client.received":
            raise HTTPException(status_code=422, detail="notice_ids are received, never rendered or conflicting")
        kind = {"client.received": ClientReceived, "client.rendered": ClientRendered,
                "client.conflict": ClientConflict}[body.type]
        fields: dict[str, Any] = {"run_id": run_id, "account_id": account, "last_event_id": body.last_event_id,
                                  "block_ids": body.block_ids, "client_id": body.client_id,
                                  "revisions": body.revisions}
        if body.event_id is not None:
            fields["event_id"] = body.event_id
        if kind is ClientConflict:
            fields["detail"] = body.detail
        if kind is ClientReceived:
            fields["notice_ids"] = body.notice_ids
        message = kind(**fields)
        if kind is not ClientConflict:  # kept before it is announced: a retried receipt adds nothing
            named: dict[str, int | None] = {block_id: None for block_id in body.block_ids}
            named.update(body.revisions)
            await ctx.sightings(ClientReport(
                run_id=run_id, kind=body.type, client_id=body.client_id, last_event_id=body.last_event_id,
                at=message.occurred_at.isoformat(), revisions=named, notice_ids=body.notice_ids))
        await ctx.publish(message)
        ctx.metrics.receipts.labels(body.type).inc()
        return {"accepted": body.type, "event_id": str(message.event_id)}

    @api.post("/v1/runs/{run_id}/cancel", status_code=202, responses={409: {"description": "run already finished"}})
    async def cancel(run_id: str, account: Limited) -> dict[str, Any]:
        """Ask the run to stop (the only thing that does, D2; X11).

        ``kept`` names what the user keeps: the committed block revisions Delivery held when
        it accepted the request — ``blocks`` [{block_id, revision, delivery_ordinal,
        body_sha256, receipt_id}] in display order, as of the run's frame ``as_of_event_id``.
        This is Delivery's view at that moment: a preview is never in it, and a block the
        runtime had already proposed may still commit before its stop, then it stays too and
        the run's stream shows it before ``done``."""
        record = await ctx.owned_run(run_id, account)
        if record.terminal:
            raise HTTPException(status_code=409, detail="run already finished")
        message = RunCancelRequested(run_id=run_id, account_id=account)
        await ctx.publish(message)
        kept = await asyncio.to_thread(store.kept_blocks, run_id)
        log.info("cancel requested", run_id=run_id, kept=len(kept["blocks"]))
        return {"cancel_requested": True, "event_id": str(message.event_id), "kept": kept}

    return api

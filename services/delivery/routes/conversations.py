"""A conversation's history (D5) and its delete request (X8)."""

# No "from __future__ import annotations": FastAPI must see the Annotated dependencies.
import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException

from imprint.contracts.control import ConversationDeleteRequested
from imprint.delivery.execution import shown_answer_text
from services.common.observability import get_logger
from services.delivery.routes import UNAUTHORIZED, Shared, rate_limited
from services.delivery.view_store import RunRecord

log = get_logger(__name__)


def router(ctx: Shared) -> APIRouter:
    api = APIRouter(tags=["conversations"], responses={
        **UNAUTHORIZED, 404: {"description": "no such conversation for this account (D6)"}})
    Account = Annotated[str, Depends(ctx.current_account)]
    Limited = Annotated[str, Depends(rate_limited(ctx))]
    store = ctx.store

    async def owned_conversation(conversation_id: str, account: str) -> list[RunRecord]:
        records = await asyncio.to_thread(store.history, conversation_id)
        mine = [r for r in records if ctx.owns(r, account)]
        if not mine:
            raise HTTPException(status_code=404, detail="conversation not found")
        return mine

    @api.get("/v1/conversations/{conversation_id}/history")
    async def history(conversation_id: str, account: Account) -> dict[str, Any]:
        """Every run of the conversation: execution state, blocks and (D5) the closed
        answer text once its delivery completed."""
        runs = []
        for record in await owned_conversation(conversation_id, account):
            view = await asyncio.to_thread(store.answer_view, record.run_id) or {"blocks": [], "conflicts": []}
            entry = ctx.execution(record)
            entry["blocks"] = view["blocks"]
            entry["answer_text"] = shown_answer_text(entry, await asyncio.to_thread(store.answer_text, record.run_id))
            runs.append(entry)
        return {"conversation_id": conversation_id, "runs": runs}

    @api.delete("/v1/conversations/{conversation_id}", status_code=202)
    async def delete_conversation(conversation_id: str, account: Limited) -> dict[str, Any]:
        """Ask for the conversation to be deleted (X8)."""
        await owned_conversation(conversation_id, account)
        message = ConversationDeleteRequested(conversation_id=conversation_id, account_id=account, reason="user")
        await ctx.publish(message)
        log.info("conversation delete requested", conversation_id=conversation_id)
        return {"delete_requested": True, "event_id": str(message.event_id)}

    return api

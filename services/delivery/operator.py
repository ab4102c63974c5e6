"""The run inspector, served by Delivery for operators (SPEC §1's five facts, R2, D6).

``GET /operator``
    the inspector page (a static shell: ``static/inspector.html`` and its script; it
    holds no data — the run and the token travel in the URL fragment, as for ``/``).
``GET /v1/operator/runs/{run_id}/timeline``
    one run as a timeline (:func:`imprint.recovery.timeline`): the Publication log
    (what was committed — the only authority), the journal's store read-only (its
    lifecycle and the effects it observed), Delivery's own frames, and the
    announcements on Kafka (proposals, previews, delivery and client receipts), with
    Delivery's report of who saw each withdrawn block revision (D7).
``GET /v1/operator/runs/{run_id}/seen``
    that report alone, as JSON for an audit: for each withdrawn block revision, the
    clients that reported it rendered, when, and whether each received the withdrawal
    (:mod:`imprint.delivery.seen`; Delivery's store only — ids, revisions, causes, times).

Only a bearer token carrying the operator claim (``"operator": true``, minted by
``imprint token --account A --operator``) reads a timeline. Any other valid token
gets 404, exactly like a run that does not exist (D6): an ordinary account cannot
tell that the operator view exists. A missing or invalid token is 401, as on every
route. Nothing here writes."""

# No "from __future__ import annotations": FastAPI must see the local Annotated dependencies.
import asyncio
import time
from typing import Annotated, Any

import jwt
from fastapi import APIRouter, Depends, HTTPException, Path as PathParam, Request
from fastapi.responses import Response

from services.common.observability import get_logger
from services.common.settings import Settings
from services.delivery.auth import ALGORITHM, ISSUER, bearer, verify_token
from services.delivery.routes.ops import page
from services.delivery.view_store import ViewStore
from services.publication.application import open_log
from services.recovery.cli import assemble_timeline, observe_run
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import read_ledger

log = get_logger(__name__)

OPERATOR_CLAIM = "operator"
RunId = Annotated[str, PathParam(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f/]+$")]


def mint_operator_token(settings: Settings, account: str, ttl: float | None = None, *,
                        ttl_seconds: float | None = None) -> str:
    """A bearer token for ``account`` with the operator claim."""
    if not account or len(account) > 200:
        raise ValueError("account must be 1..200 characters")
    lifetime = ttl_seconds if ttl_seconds is not None else ttl
    lifetime = settings.token_ttl_seconds if lifetime is None else lifetime
    if lifetime <= 0:
        raise ValueError("the token's lifetime must be positive")
    now = int(time.time())
    claims = {"sub": account, "iat": now, "exp": now + int(lifetime), "iss": ISSUER, OPERATOR_CLAIM: True}
    return jwt.encode(claims, settings.auth_secret.get_secret_value(), algorithm=ALGORITHM)


def is_operator(settings: Settings, token: str) -> bool:
    """Whether a token that :func:`verify_token` accepted also carries the operator claim."""
    claims = jwt.decode(token, settings.auth_secret.get_secret_value(), algorithms=[ALGORITHM],
                        options={"require": ["exp", "sub"]}, leeway=0)
    return claims.get(OPERATOR_CLAIM) is True


def operator_router(settings: Settings, store: ViewStore) -> APIRouter:
    router = APIRouter()

    async def operator(request: Request) -> str:
        token = bearer(request)
        account = verify_token(settings, token)  # 401 when missing, malformed, expired
        if not is_operator(settings, token):
            raise HTTPException(status_code=404, detail="run not found")
        return account

    Operator = Annotated[str, Depends(operator)]

    @router.get("/operator", include_in_schema=False)
    async def inspector_page() -> Response:
        return page("inspector.html")

    @router.get("/v1/operator/runs/{run_id}/timeline")
    async def run_timeline(run_id: RunId, account: Operator) -> dict[str, Any]:
        observed = await observe_run(settings, run_id)
        document = await asyncio.to_thread(_assemble, settings, store, run_id, observed)
        if document is None:
            raise HTTPException(status_code=404, detail="run not found")
        log.info("run inspected", run_id=run_id, operator=account)
        return document

    @router.get("/v1/operator/runs/{run_id}/seen")
    async def run_seen(run_id: RunId, account: Operator) -> dict[str, Any]:
        """D7: who saw each withdrawn block revision of the run, and whether each was told."""
        report = await asyncio.to_thread(store.seen, run_id)
        if report is None:
            raise HTTPException(status_code=404, detail="run not found")
        log.info("withdrawals audited", run_id=run_id, operator=account)
        return report

    return router


def _assemble(settings: Settings, store: ViewStore, run_id: str, observed: Any) -> dict[str, Any] | None:
    app = open_log(settings)
    try:
        if read_ledger(app, run_id) is None and store.run(run_id) is None:
            return None
        with JournalReader(settings) as journal:
            return assemble_timeline(app, run_id, store=store, observed=observed, journal=journal)
    finally:
        app.close()


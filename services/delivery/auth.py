"""D6: bearer tokens (HS256, ``sub`` = account, ``exp`` required), stream tickets
(for clients that cannot send a header), the request size limit and a per-account
rate limit for POST routes.

A malformed, unsigned, wrongly signed or expired token is 401. Whether a run does
not exist or belongs to another account is indistinguishable: both are 404."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from fastapi import HTTPException, Request

from imprint.delivery.feeds import notice_feed
from imprint.delivery.tickets import ticket_digest
from services.common.settings import Settings

ALGORITHM = "HS256"
ISSUER = "imprint"


class Unauthorized(HTTPException):
    def __init__(self, detail: str = "invalid or missing bearer token") -> None:
        super().__init__(status_code=401, detail=detail, headers={"WWW-Authenticate": 'Bearer realm="imprint"'})


def mint_token(settings: Settings, account: str, ttl: float | None = None, *, ttl_seconds: float | None = None) -> str:
    """A bearer token for ``account`` (``imprint token --account A``)."""
    if not account or len(account) > 200:
        raise ValueError("account must be 1..200 characters")
    lifetime = ttl_seconds if ttl_seconds is not None else ttl
    lifetime = settings.token_ttl_seconds if lifetime is None else lifetime
    now = int(time.time())
    claims = {"sub": account, "iat": now, "exp": now + int(lifetime), "iss": ISSUER}
    return jwt.encode(claims, settings.auth_secret.get_secret_value(), algorithm=ALGORITHM)


def verify_token(settings: Settings, token: str) -> str:
    """The account named by a valid token; :class:`Unauthorized` otherwise."""
    try:
        claims = jwt.decode(
            token, settings.auth_secret.get_secret_value(), algorithms=[ALGORITHM],
            options={"require": ["exp", "sub"]}, leeway=0,
        )
    except jwt.ExpiredSignatureError as error:
        raise Unauthorized("token expired") from error
    except jwt.PyJWTError as error:
        raise Unauthorized() from error
    account = claims.get("sub")
    if not isinstance(account, str) or not account or len(account) > 200:
        raise Unauthorized()
    return account


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized()
    return token.strip()


def account_dependency(settings: Settings) -> Callable[[Request], Awaitable[str]]:
    async def current_account(request: Request) -> str:
        account = verify_token(settings, bearer(request))
        request.state.account = account
        return account

    return current_account


class StreamTickets:
    """Stream tickets (the rule is :mod:`imprint.delivery.tickets`): random, opaque,
    bound to (account, run) — or (account, a conversation's notices: its scope is
    :func:`ticket_scope`) — expiring ``ttl`` seconds after last use. Only their hash is
    held, in the view store every Delivery instance shares, so a browser's reconnect may
    reach any instance (no sticky sessions). Calls block on the store: run
    them off the event loop."""

    def __init__(self, store: Any, ttl: float) -> None:
        self.store = store
        self.ttl = ttl

    def mint(self, account: str, run_id: str) -> tuple[str, float]:
        ticket = secrets.token_urlsafe(32)
        self.store.issue_ticket(ticket_digest(ticket), account, run_id, time.time() + self.ttl)
        return ticket, self.ttl

    def touch(self, ticket: str, run_id: str) -> None:
        """A stream opened with ``ticket`` ended: that is a use too, so a connection that
        lasted longer than ``ttl`` can still be resumed with the same ticket."""
        self.store.use_ticket(ticket_digest(ticket), run_id, time.time(), self.ttl)

    def account(self, ticket: str, run_id: str) -> str | None:
        return self.store.use_ticket(ticket_digest(ticket), run_id, time.time(), self.ttl)


def ticket_scope(path_params: Mapping[str, Any]) -> str:
    """What a stream ticket opens: the path's run (``run_id``), or the path's conversation's
    streams (``conversation_id``: its notices, D7, and its conversation stream, D9; one scope,
    the notices' feed key) — never both, never another."""
    conversation = path_params.get("conversation_id")
    return notice_feed(str(conversation)) if conversation is not None else str(path_params.get("run_id", ""))


def stream_account_dependency(settings: Settings, tickets: StreamTickets) -> Callable[[Request], Awaitable[str]]:
    """The account of a stream request: a bearer header, or a live ``ticket`` query
    parameter for exactly this run or conversation (:func:`ticket_scope`)."""

    async def stream_account(request: Request) -> str:
        ticket = request.query_params.get("ticket")
        if ticket and "authorization" not in request.headers:
            account = await asyncio.to_thread(tickets.account, ticket, ticket_scope(request.path_params))
            if account is None:
                raise Unauthorized("invalid or expired stream ticket")
            request.state.ticket = ticket
        else:
            account = verify_token(settings, bearer(request))
        request.state.account = account
        return account

    return stream_account


@dataclass
class RateLimiter:
    """A token bucket per account: ``rate`` requests per ``per`` seconds, burst ``rate``."""

    rate: int = 60
    per: float = 60.0
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def allow(self, account: str) -> tuple[bool, float]:
        now = time.monotonic()
        tokens, stamp = self.buckets.get(account, (float(self.rate), now))
        tokens = min(float(self.rate), tokens + (now - stamp) * self.rate / self.per)
        if tokens < 1.0:
            self.buckets[account] = (tokens, now)
            return False, (1.0 - tokens) * self.per / self.rate
        self.buckets[account] = (tokens - 1.0, now)
        if len(self.buckets) > 100_000:
            self.buckets.clear()
        return True, 0.0


class RequestSizeLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413 — by its
    Content-Length, or (chunked bodies) by reading at most ``limit + 1`` bytes first."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    await _refuse(send, 413, b'{"detail":"request body too large"}')
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await _refuse(send, 413, b'{"detail":"request body too large"}')
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        buffered = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": buffered, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _refuse(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})

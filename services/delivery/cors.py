"""Cross-origin front ends: ``IMPRINT_CORS_ORIGINS``, an explicit allow-list.

Unset (the default), Delivery adds no CORS header at all: only pages it serves itself
call it from a browser. For a listed origin, a browser may send credentials,
``Authorization``, ``Content-Type`` and ``Last-Event-ID`` (the SSE resume header), so
every route works from that page: the stream-ticket flow (``POST …/stream-tickets``
with the bearer, then ``EventSource`` on the ticket URL), the resumable streams, the
AI SDK UI message stream, receipts, cancel and delete. Preflights are answered here.

An origin off the list gets no CORS grant of any kind: its preflight is refused (403,
no ``Access-Control-*`` header) and its requests pass through untouched, so the browser
keeps the response from the page. Starlette's ``CORSMiddleware`` decides for listed
origins; this subclass only keeps it silent for everyone else (it would otherwise send
its credentials and method headers without an origin grant) and off the write path
of their responses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse, Response

METHODS = ("GET", "POST", "DELETE")
REQUEST_HEADERS = ("Authorization", "Content-Type", "Last-Event-ID")
EXPOSED_HEADERS = ("Retry-After", "WWW-Authenticate", "x-vercel-ai-ui-message-stream")


class AllowListedOrigins(CORSMiddleware):
    """CORS for the listed origins only, with credentials."""

    def __init__(self, app: Any, origins: Sequence[str]) -> None:
        super().__init__(app, allow_origins=frozenset(origins), allow_methods=METHODS,
                         allow_headers=REQUEST_HEADERS, allow_credentials=True, expose_headers=EXPOSED_HEADERS)

    def preflight_response(self, request_headers: Headers) -> Response:
        if not self.is_allowed_origin(request_headers["origin"]):
            return PlainTextResponse("origin not allowed", status_code=403, headers={"Vary": "Origin"})
        return super().preflight_response(request_headers)

    async def simple_response(self, scope: Any, receive: Any, send: Any, request_headers: Headers) -> None:
        origin = request_headers.get("origin")
        if origin is None or not self.is_allowed_origin(origin):
            await self.app(scope, receive, send)
            return
        await super().simple_response(scope, receive, send, request_headers)

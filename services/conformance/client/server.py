"""The kit's SSE server: one case's run served on 127.0.0.1 over real HTTP, in the forms and
routes a Delivery serves it — ``GET /v1/runs/{id}/events`` (imprint's SSE, resumed with
``Last-Event-ID``: :func:`imprint.delivery.reset.resume` decides continue, 204 or ``reset``),
``GET /v1/ai-sdk/runs/{id}/stream`` (the AI SDK UI message stream), the conversation's
notices in both forms (and as the conversation stream the reference page follows, D9),
stream tickets (:class:`imprint.delivery.tickets.TicketBook` on the kit's own clock, so a case
can expire them), the run's record and its receipts. Every byte
of a frame, a part or a notice is Delivery's own encoding (:mod:`services.delivery.sse` and
:mod:`services.delivery.stream_formats`); only what happens *between* frames is the kit's:
it drops connections, repeats frames a client already holds, expires tickets and restores
the store from an older backup when a case says so."""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from imprint.delivery.frame import DONE, RESET, Frame, reset_frame
from imprint.delivery.reset import Continue, NothingMore, Reset, resume
from imprint.delivery.tickets import Grant, TicketBook
from imprint.delivery.ui_message_stream import UIMessageStream, encode, notice_part, reset_part
from services.conformance.client.script import ACCOUNT, LATER_KIND, MemoryView
from services.delivery.sse import frame_event
from services.delivery.stream_formats import SSEFrames, StreamFormat, UIMessageParts, UINoticeParts

RETRY_MS = 20
"""The ``retry`` the kit's streams open with. Delivery's is seconds; a case drops and resumes
many times, and how soon a client comes back is not what it checks."""
TICKET_TTL = 60.0
ROUTES = [
    ("GET", re.compile(r"/v1/runs/(?P<id>[^/]+)/events"), "run_events"),
    ("GET", re.compile(r"/v1/ai-sdk/runs/(?P<id>[^/]+)/stream"), "ui_stream"),
    ("GET", re.compile(r"/v1/conversations/(?P<id>[^/]+)/notices"), "notices"),
    # D9: the conversation stream carries a copy of every notice; the cases play no turns (the
    # view's turn() keeps none), so its entries are the notices, with their ids.
    ("GET", re.compile(r"/v1/conversations/(?P<id>[^/]+)/events"), "notices"),
    ("GET", re.compile(r"/v1/ai-sdk/conversations/(?P<id>[^/]+)/notices"), "ui_notices"),
    ("GET", re.compile(r"/v1/runs/(?P<id>[^/]+)"), "run_record"),
    ("POST", re.compile(r"/v1/runs/(?P<id>[^/]+)/stream-tickets"), "run_ticket"),
    ("POST", re.compile(r"/v1/conversations/(?P<id>[^/]+)/stream-tickets"), "notices_ticket"),
    ("POST", re.compile(r"/v1/runs/(?P<id>[^/]+)/receipts"), "receipts"),
]


@dataclass
class Session:
    """One case's run as the server holds it, and what it did (under ``cond``)."""

    view: MemoryView
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    cond: threading.Condition = field(default_factory=threading.Condition)
    tickets: TicketBook = field(default_factory=lambda: TicketBook(ttl=TICKET_TTL))
    clock: float = 0.0
    generation: int = 0
    """Bumped to drop every open connection."""
    replay: int = 0
    notices_replay: int = 0
    served: int = 0
    """Events written that a client dispatches (frames, parts, notices; not ``retry``, not ``[DONE]``)."""
    delivered: dict[str, int | None] = field(default_factory=lambda: {"run": None, "notices": None})
    """The highest id a connection of the current store wrote, per stream (``None``: none opened)."""
    connections: int = 0
    refused: int = 0
    receipts: int = 0
    """Receipts the client posted (D4): accepted, not checked — what a client reports is its own."""
    closed: bool = False
    grown: bool = False
    """Serve v1 as a later server may (R8, docs/protocol.md's versioning): every object carries a
    field this client does not know."""
    later: bool = False
    """The frames of a kind a later v1 server may add (R8) go to the AI SDK forms as ``data-``
    parts of a type this client does not know (the only part types a v1 server may add)."""

    @property
    def feed(self) -> str:
        return f"notices:{self.view.conversation_id}"

    def mint(self, scope: str) -> str:
        ticket = secrets.token_urlsafe(24)
        self.tickets.issue(ticket, Grant(ACCOUNT, scope), self.clock)
        return ticket

    def drop(self, *, replay: int = 0, notices_replay: int = 0, expire: bool = False) -> None:
        with self.cond:
            self.generation += 1
            self.replay, self.notices_replay = replay, notices_replay
            if expire:
                self.clock += TICKET_TTL + 1
            self.cond.notify_all()

    def restore(self, view: MemoryView) -> None:
        """D8: the store comes back from an older backup; every connection drops."""
        with self.cond:
            self.view = view
            self.delivered = {"run": None, "notices": None}
            self.generation += 1
            self.cond.notify_all()

    def changed(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def caught_up(self) -> bool:
        """Every frame (and notice) of the store was written by some connection."""
        run, notices = self.delivered["run"], self.delivered["notices"]
        return (run is not None and run >= self.view.last_frame_id
                and (self.view.last_notice_id == 0 or (notices is not None and notices >= self.view.last_notice_id)))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KitServer

    def log_message(self, format: str, *args: Any) -> None:  # the report says what happened
        return None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._route("POST")

    def _route(self, method: str) -> None:
        self.close_connection = True
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        session = self.server.session
        if session is None:
            return self._json(404, {"detail": "no case is playing"})
        for verb, pattern, name in ROUTES:
            match = pattern.fullmatch(url.path)
            if verb == method and match:
                return getattr(self, name)(session, match["id"])
        self._json(404, {"detail": "not found"})

    # ------------------------------------------------------------------ plain answers

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _allowed(self, s: Session, scope: str) -> bool:
        if self.headers.get("Authorization") == f"Bearer {s.token}":
            return True
        ticket = self.query.get("ticket")
        with s.cond:
            if ticket and s.tickets.use(ticket, scope, s.clock) is not None:
                return True
            s.refused += 1
        self._json(401, {"detail": "missing, invalid or expired bearer token (or stream ticket)"})
        return False

    def _bearer(self, s: Session) -> bool:
        if self.headers.get("Authorization") == f"Bearer {s.token}":
            return True
        self._json(401, {"detail": "missing or invalid bearer token"})
        return False

    def run_record(self, s: Session, run_id: str) -> None:
        if self._bearer(s):
            self._json(200, {"run_id": run_id, "conversation_id": s.view.conversation_id})

    def run_ticket(self, s: Session, run_id: str) -> None:
        if self._bearer(s):
            with s.cond:
                ticket = s.mint(run_id)
            self._json(201, {"ticket": ticket, "expires_in": TICKET_TTL, "run_id": run_id,
                             "events_url": f"/v1/runs/{run_id}/events?ticket={ticket}",
                             "ui_stream_url": f"/v1/ai-sdk/runs/{run_id}/stream?ticket={ticket}"})

    def notices_ticket(self, s: Session, conversation_id: str) -> None:
        if self._bearer(s):
            with s.cond:
                ticket = s.mint(s.feed)
            self._json(201, {"ticket": ticket, "expires_in": TICKET_TTL, "conversation_id": conversation_id})

    def receipts(self, s: Session, run_id: str) -> None:
        if self._bearer(s):
            with s.cond:
                s.receipts += 1
            self._json(202, {"accepted": True})

    # ------------------------------------------------------------------ streams

    def _last_event_id(self) -> int:
        raw = (self.headers.get("Last-Event-ID") or self.query.get("last_event_id") or "0").strip()
        return int(raw) if raw.isascii() and raw.isdigit() else 0

    def run_events(self, s: Session, run_id: str) -> None:
        if self._allowed(s, run_id):
            self._stream(s, "run", GrownFrames() if s.grown else SSEFrames(), resumed=True)

    def ui_stream(self, s: Session, run_id: str) -> None:
        if self._allowed(s, run_id):
            mapping = UIMessageStream(run_id=run_id, conversation_id=s.view.conversation_id)
            form = GrownParts(mapping) if s.grown else LaterParts(mapping) if s.later else UIMessageParts(mapping)
            self._stream(s, "run", form, resumed=False)

    def notices(self, s: Session, conversation_id: str) -> None:
        if self._allowed(s, s.feed):
            self._stream(s, "notices", GrownFrames() if s.grown else SSEFrames(), resumed=True)

    def ui_notices(self, s: Session, conversation_id: str) -> None:
        if self._allowed(s, s.feed):
            form = GrownNoticeParts() if s.grown else LaterNoticeParts() if s.later else UINoticeParts()
            self._stream(s, "notices", form, resumed=True)

    def _stream(self, s: Session, stream: str, form: StreamFormat, *, resumed: bool) -> None:
        """One connection: the frames after the client's position (or all of them from
        ``start``, the AI SDK's form), then live ones until ``done``, a drop or the case's end."""
        last = self._last_event_id()
        with s.cond:
            view, generation = s.view, s.generation
            frames = view.frames if stream == "run" else view.notices
            start = resume(last, last_frame_id=len(frames), terminal=stream == "run" and view.terminal)
            if isinstance(start, NothingMore) and resumed:
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            after = start.after if resumed and not isinstance(start, NothingMore) else 0
            replay = s.replay if stream == "run" else s.notices_replay
            if replay and isinstance(start, Continue) and resumed:
                after = max(0, after - replay)
                if stream == "run":
                    s.replay = 0
                else:
                    s.notices_replay = 0
            s.connections += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in form.headers:
            self.send_header(name.decode(), value.decode())
        self.end_headers()
        pending = f"retry: {RETRY_MS}\n\n".encode() if isinstance(form, SSEFrames) else form.opening()
        if isinstance(start, Reset):
            pending += form.frame(reset_frame(view.run_id, start))
        sent = after
        while True:
            with s.cond:
                while not pending and len(frames) <= sent and s.generation == generation and not s.closed:
                    s.cond.wait(1.0)
                if s.generation != generation or s.closed:
                    return self._abort()
                batch: list[Frame] = list(frames[sent:])
                data = pending + b"".join(form.frame(f) for f in batch)
                pending = b""
                # Counted before it is written: a check then waits for the client to handle all of
                # it, never for half of a replay (the AI SDK's form sends the whole message again).
                s.served += self._count(data)
                ended = stream == "run" and any(f.event == DONE for f in batch)
                if ended:
                    data += form.closing(True)  # the AI SDK's [DONE]: the end of the stream, no part
                sent = batch[-1].id if batch else sent
                mark = s.delivered[stream]
                s.delivered[stream] = sent if mark is None else max(mark, sent)
                s.cond.notify_all()
            if not self._chunk(data, last=ended) or ended:
                return None

    @staticmethod
    def _count(data: bytes) -> int:
        """Events a client dispatches: every event with a ``data`` field (``retry`` alone is none)."""
        return sum(1 for event in data.split(b"\n\n") if b"data:" in event)

    def _chunk(self, data: bytes, *, last: bool = False) -> bool:
        try:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            if last:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return True
        except OSError:
            return False

    def _abort(self) -> None:
        """Drop the connection mid-body, the way a network does."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# ---------------------------------------------------------------------- a later v1 server (R8)

ADDED = {"added_in_a_later_v1": {"note": "a v1 client ignores a field it does not know"}}


def grown(value: Any) -> Any:
    """An object with a field its reader does not know (anything else as it is)."""
    return {**value, **ADDED} if isinstance(value, dict) else value


def grown_part(part: dict[str, Any]) -> dict[str, Any]:
    """An AI SDK part grown where the SDK's strict schemas leave room: inside ``data`` and
    ``messageMetadata`` (a new top-level key would be a new part shape, not a new field)."""
    out = dict(part)
    for key in ("data", "messageMetadata"):
        if isinstance(out.get(key), dict):
            out[key] = grown(out[key])
    return out


class GrownFrames(SSEFrames):
    def frame(self, frame: Frame) -> bytes:
        return frame_event(Frame(frame.run_id, frame.id, frame.event, grown(frame.data), frame.body_sha256))


class GrownParts(UIMessageParts):
    def opening(self) -> bytes:
        return b"".join(encode(grown_part(part)) for part in self.mapping.start())

    def frame(self, frame: Frame) -> bytes:
        return b"".join(encode(grown_part(part)) for part in self.mapping.parts(frame))


class GrownNoticeParts(UINoticeParts):
    def frame(self, frame: Frame) -> bytes:
        data = frame.data if isinstance(frame.data, dict) else {}
        part = reset_part(data) if frame.event == RESET else notice_part(data)
        return f"id: {frame.id}\n".encode() + encode(grown_part(part))


# ---------------------------------------------------------------------- later kinds (R8)


def later_part(frame: Frame) -> dict[str, Any]:
    """A frame of a kind a later v1 server added, as that server's AI SDK form would carry it:
    a ``data-`` part of a new type (npm ``ai``'s reader refuses any other unknown part type)."""
    return {"type": f"data-{LATER_KIND}", "id": f"{LATER_KIND}-{frame.run_id}-{frame.id}", "data": frame.data}


class LaterParts(UIMessageParts):
    def frame(self, frame: Frame) -> bytes:
        if frame.event == LATER_KIND:
            return encode(later_part(frame))
        return super().frame(frame)


class LaterNoticeParts(UINoticeParts):
    def frame(self, frame: Frame) -> bytes:
        data = frame.data if isinstance(frame.data, dict) else {}
        if frame.event == LATER_KIND or data.get("kind") == LATER_KIND:
            return f"id: {frame.id}\n".encode() + encode(later_part(frame))
        return super().frame(frame)


class KitServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.session: Session | None = None
        self.thread = threading.Thread(target=self.serve_forever, name="conformance-kit", daemon=True)
        self.thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer is what the cases do to each other; nothing to print."""
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def play(self, view: MemoryView) -> Session:
        self.end()
        self.session = Session(view)
        return self.session

    def end(self) -> None:
        if self.session is not None:
            with self.session.cond:
                self.session.closed = True
                self.session.cond.notify_all()

    def close(self) -> None:
        self.end()
        self.shutdown()
        self.server_close()

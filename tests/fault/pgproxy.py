"""A TCP proxy in front of PostgreSQL (asyncio, 127.0.0.1 only) that understands just
enough of the wire protocol to cut a connection around a COMMIT.

It parses the frontend stream message by message (answering an SSLRequest/GSSENCRequest
with ``N`` so the stream stays readable) and the backend stream likewise. Faults, armed
from the test thread:

``arm("after_commit")``
    forward the COMMIT (and the Sync that makes PostgreSQL execute it), wait for the
    server's CommandComplete + ReadyForQuery, then close both sides WITHOUT relaying
    the reply: the transaction is durable, the client cannot know.
``arm("before_commit")``
    close both sides instead of forwarding the COMMIT: PostgreSQL rolls back; the client
    sees the same lost connection.

With ``watch`` (a table name), only the COMMIT of a transaction that INSERTed into that
table is hit — e.g. ``publication_tracking``: the tracked transaction of a consumer
poll, not a key lookup or a quota flush. Either way the next ``then_refuse`` attempts
(any connection) are cut at their first statement on the watched table (or at BEGIN
without ``watch``), so the client's own retries cannot find out what happened and it
has to report the outcome as unknown. Reads pass. Everything else passes untouched."""

from __future__ import annotations

import asyncio
import struct
import threading
from dataclasses import dataclass, field

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


@dataclass
class Fault:
    mode: str  # "after_commit" | "before_commit"
    then_refuse: int
    watch: str | None


@dataclass
class ProxyLog:
    events: list[str] = field(default_factory=list)

    def add(self, event: str) -> None:
        self.events.append(event)


def query_of(kind: bytes, payload: bytes, statements: dict[bytes, str]) -> str | None:
    """The SQL text of a simple Query, an extended-protocol Parse, or a Bind of a
    (possibly prepared, i.e. named) statement parsed earlier on this connection."""
    if kind == b"Q":
        return payload.rstrip(b"\x00").decode("utf-8", "replace")
    if kind == b"P":
        name, _, rest = payload.partition(b"\x00")
        statements[name] = rest.split(b"\x00", 1)[0].decode("utf-8", "replace")
        return statements[name]
    if kind == b"B":
        _portal, _, rest = payload.partition(b"\x00")
        return statements.get(rest.split(b"\x00", 1)[0])
    return None


class PgProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.log = ProxyLog()
        self._fault: Fault | None = None
        self._refuse = 0
        self._watch: str | None = None
        self._containing: str | None = None
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="pgproxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    # ------------------------------------------------------------ control (any thread)

    def start(self) -> int:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def arm(self, mode: str, then_refuse: int = 9, watch: str | None = None) -> None:
        assert mode in ("after_commit", "before_commit")
        with self._lock:
            self._fault = Fault(mode, then_refuse, watch.upper() if watch else None)

    def cut_statements(self, containing: str, times: int = 1) -> None:
        """Cut the connection at the next ``times`` statements whose SQL contains ``containing``."""
        with self._lock:
            self._refuse, self._watch, self._containing = times, None, containing.upper()

    def disarm(self) -> None:
        with self._lock:
            self._fault = None
            self._refuse = 0
            self._containing = None

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._fault is not None or self._refuse > 0

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    # ------------------------------------------------------------ the proxy (its loop)

    def _take_commit_fault(self, touched_watched: bool) -> Fault | None:
        with self._lock:
            fault = self._fault
            if fault is None or (fault.watch is not None and not touched_watched):
                return None
            self._fault = None
            self._refuse, self._watch, self._containing = fault.then_refuse, fault.watch, None
            return fault

    def _refuse_now(self, query: str) -> bool:
        with self._lock:
            if self._refuse <= 0:
                return False
            if self._containing:
                hit = self._containing in query
            elif self._watch:
                hit = query.startswith("INSERT") and self._watch in query
            else:
                hit = query.startswith("BEGIN")
            if hit:
                self._refuse -= 1
            return hit

    def _watching(self, query: str) -> bool:
        with self._lock:
            watch = self._fault.watch if self._fault is not None else None
        return watch is not None and query.startswith("INSERT") and watch in query

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        state = {"commit_sent": False, "closed": False, "tag": ""}
        done = asyncio.Event()

        def cut() -> None:
            if not state["closed"]:
                state["closed"] = True
                for writer in (client_w, server_w):
                    writer.transport.abort()
            done.set()

        async def frontend() -> None:
            # startup: [SSLRequest|GSSENCRequest]* StartupMessage (untyped)
            while True:
                head = await client_r.readexactly(8)
                length, code = struct.unpack("!ii", head)
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    client_w.write(b"N")
                    await client_w.drain()
                    continue
                server_w.write(head + await client_r.readexactly(length - 8))
                break
            pending_commit: Fault | None = None
            touched_watched = False
            statements: dict[bytes, str] = {}
            while True:
                kind = await client_r.readexactly(1)
                (length,) = struct.unpack("!i", await client_r.readexactly(4))
                payload = await client_r.readexactly(length - 4)
                raw = kind + struct.pack("!i", length) + payload
                query = (query_of(kind, payload, statements) or "").strip().upper()
                if kind == b"P":
                    query = ""  # decided at its Bind: a Parse alone executes nothing
                if query and self._refuse_now(query):
                    self.log.add("attempt refused")
                    cut()
                    return
                touched_watched = touched_watched or self._watching(query)
                if query.startswith(("COMMIT", "ROLLBACK")):
                    fault = self._take_commit_fault(touched_watched) if query.startswith("COMMIT") else None
                    touched_watched = False
                else:
                    fault = None
                if fault is not None:
                    if fault.mode == "before_commit":
                        self.log.add("commit dropped before the server saw it")
                        cut()
                        return
                    pending_commit = fault
                if pending_commit is not None and kind in (b"Q", b"S"):  # the COMMIT executes now
                    state["commit_sent"] = True
                    pending_commit = None
                server_w.write(raw)
                await server_w.drain()

        async def backend() -> None:
            while True:
                kind = await server_r.readexactly(1)
                (length,) = struct.unpack("!i", await server_r.readexactly(4))
                payload = await server_r.readexactly(length - 4)
                if state["commit_sent"]:
                    if kind == b"C":
                        state["tag"] = payload.rstrip(b"\x00").decode()
                    if kind == b"Z":
                        self.log.add(f"server replied {state['tag'] or '?'}; reply withheld, connection cut")
                        cut()
                        return
                    continue
                client_w.write(kind + struct.pack("!i", length) + payload)
                await client_w.drain()

        tasks = [asyncio.ensure_future(frontend()), asyncio.ensure_future(backend())]
        try:
            await asyncio.wait([*tasks, asyncio.ensure_future(done.wait())], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            cut()

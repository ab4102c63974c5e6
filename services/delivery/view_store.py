"""The delivery projection, persisted: per-run frames, runs, per-block answer state,
conflicts and the Kafka position — all written in one transaction per batch.

The Kafka position is eventsourcing's tracking record (``Inbound.tracking``:
application ``<topic>#<partition>``, notification id = offset), recorded in the same
transaction as the rows it caused, the way eventsourcing's docs build materialized
views: :class:`PostgresDeliveryRecorder` / :class:`SQLiteDeliveryRecorder` subclass
the tracking recorders and add their own tables. A redelivered message (its offset is
already tracked) changes nothing and appends no frame; a restart loses neither views
nor resume positions.

Frames get a per-run id 1, 2, 3, … (D1), assigned here under the run row's lock, so
any number of Delivery instances sharing this store agree on them. A frame superseded
by a newer frame of the same key (the same block, ``run-status``, ``progress``) keeps
its id, event and hash but loses its body (see :mod:`imprint.delivery.frames`), so a
new client replaying from id 1 first sees the current merged view, never a withdrawn
body.

**Append, never rewrite.** A batch costs what it touches, not the run's history: the
run row (identity, lifecycle, the live frame of its run-level keys), the rows of the
blocks its messages name (:func:`imprint.delivery.merge.named_blocks`: state and the
block's live frame with its skeleton), new frame rows, and one ``UPDATE`` per
superseded frame. ``answer_view`` derives the entry each block shows from its state
(:func:`imprint.delivery.merge.display`) when asked: a stored display entry was one
more copy of the body in every block write. Only the terminal (once per run), a
withdrawal after ``done`` and a conversation's deletion read a run's frames.

**Hot runs.** The runs a batch touched stay in memory with the rows they loaded (their
projection, parsed block states and live frames), keyed by the run row's ``version``,
which every write of the run's rows increments under the row lock. The next batch still
locks and reads the run row; when its version is the cached one, nothing else is read or
parsed. Another instance's write, a purge or a failed transaction makes the copy stale or
drops it, and the run is read again. A run that ended (``done`` written) or was deleted
is not kept; the rest are bounded by :data:`HOT_BLOCKS`.

**Several instances.** The instances form one consumer group over one shared store.
During a rebalance the old and the new owner of a partition may apply overlapping polls
at the same moment: a transaction-scoped advisory lock per partition, taken before the
position is read, makes the second wait and then skip what the first committed.

**Wake-ups.** On PostgreSQL the batch's transaction also ``NOTIFY``s the store's
channel with the run ids that changed (delivered on commit), so every Delivery
instance listening on the shared store wakes its live feeds (see
:mod:`services.delivery.notifier`).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import InfrastructureFactory, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteDatastore, SQLiteTrackingRecorder
from eventsourcing.utils import Environment
import psycopg
from psycopg.sql import SQL
from pydantic_core import from_json, to_json

from imprint.contracts.runs import RunClosed
from imprint.delivery import merge
from imprint.delivery.frames import (
    DONE,
    SUMMARY,
    Frame,
    FrameDraft,
    RunProjection,
    skeleton,
    step,
    terminal_drafts,
)
from imprint.delivery.summary import validate_stream
from services.common.eventstore import reading, store_environment
from services.common.inbound import Inbound
from services.common.observability import get_logger
from services.common.recorders import PostgresTrackings
from services.common.settings import Settings

log = get_logger(__name__)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")
PRIVATE_FRAME_EVENTS = ("answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
                        "content", "evidence-summary", "progress", "error")
HOT_BLOCKS = 2_000
"""At most this many block states are kept in memory across the hot runs (least recently
used runs go first); a block state with its stored JSON is ~4–6 KB, and a large heap
makes every garbage collection of the process slower (this bound keeps it ~10 MB)."""
ROWS_PER_STATEMENT = 500
"""Rows per multi-row ``VALUES`` statement."""
FRAME_COLUMNS = ("run_id", "frame_id", "event", "data", "body_sha256", "skey", "superseded", "created_at")
RUN_COLUMNS = ("account_id", "conversation_id", "state", "outcome", "last_frame_id", "deleted", "projection",
               "live_frames", "conflict_count", "updated_at", "run_id")
BLOCK_COLUMNS = ("run_id", "block_id", "state", "frame_id", "frame_skeleton", "updated_at")
NOTIFY_PAYLOAD_BYTES = 7000
"""PostgreSQL caps a notification's payload at 8000 bytes; run ids are packed below that."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _json(value: Any) -> str:
    """``value`` as compact JSON text (UTF-8, nothing escaped), the way every frame and
    live-frame skeleton is stored: pydantic-core's encoder, ~3.5× faster than
    ``json.dumps`` for a frame of ~1 KB (JSON encoding was a fifth of Delivery's CPU)."""
    return to_json(value).decode()


@dataclass(frozen=True)
class RunRecord:
    """One run as Delivery knows it (no private body)."""

    run_id: str
    account_id: str | None
    conversation_id: str | None
    message_id: str | None
    state: str | None
    outcome: str | None
    sequence: int
    closed: bool
    terminal: bool
    deleted: bool
    delivery: str
    """``pending`` | ``interrupted`` | ``completed`` (sticky once completed)."""
    last_frame_id: int
    first_seen: str
    reason: str | None = None


@dataclass(frozen=True)
class FeedRead:
    """What a live feed reads after a wake-up: new frames and where the run stands."""

    frames: list[Frame]
    exists: bool
    deleted: bool
    terminal: bool
    last_frame_id: int


class DeliveryTables:
    """SQL shared by both recorders. ``{runs}``, ``{blocks}``, ``{frames}``, ``{conflicts}``
    are replaced by the (schema-qualified) table names; ``?`` is the placeholder."""

    prefix: str
    placeholder: str = "?"
    lock_suffix: str = ""
    channel: str | None = None
    """The LISTEN/NOTIFY channel of this store (PostgreSQL only)."""

    def table_names(self) -> dict[str, str]:
        raise NotImplementedError

    def columns(self, c: Any, table: str) -> set[str]:
        raise NotImplementedError

    def q(self, statement: str) -> str:
        statement = statement.format(**self.table_names())
        return statement.replace("?", self.placeholder) if self.placeholder != "?" else statement

    def ddl(self) -> list[str]:
        return [self.q(s) for s in (
            "CREATE TABLE IF NOT EXISTS {runs} ("
            " run_id TEXT PRIMARY KEY, account_id TEXT, conversation_id TEXT, state TEXT, outcome TEXT,"
            " last_frame_id BIGINT NOT NULL DEFAULT 0, terminal_frame_id BIGINT,"
            " delivery TEXT NOT NULL DEFAULT 'pending', deleted INTEGER NOT NULL DEFAULT 0,"
            " projection TEXT NOT NULL, live_frames TEXT NOT NULL DEFAULT '{{}}',"
            " conflict_count BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0,"
            " first_seen TEXT NOT NULL, updated_at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {runs_index} ON {runs} (conversation_id)",
            "CREATE TABLE IF NOT EXISTS {blocks} ("
            " run_id TEXT NOT NULL, block_id TEXT NOT NULL, state TEXT NOT NULL,"
            " frame_id BIGINT, frame_skeleton TEXT, updated_at TEXT NOT NULL, PRIMARY KEY (run_id, block_id))",
            "CREATE TABLE IF NOT EXISTS {frames} ("
            " run_id TEXT NOT NULL, frame_id BIGINT NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL,"
            " body_sha256 TEXT NOT NULL, skey TEXT, superseded INTEGER NOT NULL DEFAULT 0,"
            " created_at TEXT NOT NULL, PRIMARY KEY (run_id, frame_id))",
            "CREATE INDEX IF NOT EXISTS {frames_index} ON {frames} (run_id, skey)",
            "CREATE TABLE IF NOT EXISTS {conflicts} ("
            " run_id TEXT NOT NULL, seq BIGINT NOT NULL, block_id TEXT NOT NULL, revision BIGINT NOT NULL,"
            " first_kind TEXT NOT NULL, first_sha256 TEXT NOT NULL, second_kind TEXT NOT NULL,"
            " second_sha256 TEXT NOT NULL, frame_id BIGINT, detected_at TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
            "CREATE TABLE IF NOT EXISTS {tickets} ("
            " digest TEXT PRIMARY KEY, account_id TEXT NOT NULL, run_id TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
        )]

    def insert_rows(self, c: Any, into: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                    tail: str = "") -> None:
        """``INSERT INTO into (columns)`` many rows in one statement (a multi-row ``VALUES``
        list), not one prepared statement per row: on PostgreSQL a 12-row insert costs
        ~50 µs of CPU this way, ~230 µs as ``executemany`` and several ms as ``unnest``
        of arrays (psycopg escapes each long text element in Python)."""
        for part in _parts(rows):
            self.execute_values(c, f"INSERT INTO {into} ({', '.join(columns)}) VALUES "
                                   f"{self.values(len(part), len(columns))}{tail}", _flat(part))

    def update_rows(self, c: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                    keys: Sequence[str], also: str = "") -> None:
        """``UPDATE table`` many rows in one statement: each row gives ``columns`` (the
        ``keys`` among them select the row, the others are set), ``also`` adds fixed
        assignments (``"superseded = 1"``)."""
        sets = ", ".join([*(f"{name} = v.{name}" for name in columns if name not in keys), *([also] if also else [])])
        where = " AND ".join(f"{table}.{name} = v.{name}" for name in keys)
        for part in _parts(rows):
            self.execute_values(c, f"WITH v ({', '.join(columns)}) AS (VALUES {self.values(len(part), len(columns))}) "
                                   f"UPDATE {table} SET {sets} FROM v WHERE {where}", _flat(part))

    def values(self, rows: int, width: int) -> str:
        """The placeholders of a multi-row ``VALUES`` list."""
        row = "(" + ", ".join("?" * width) + ")"
        return ", ".join([row] * rows)

    def execute_values(self, c: Any, statement: str, params: Sequence[Any]) -> None:
        c.execute(self.q(statement), params)

    def frames_after_many(self, c: Any, cursors: Mapping[str, int], limit: int) -> list[Any]:
        """Rows (run_id, frame_id, event, data, body_sha256) of each run's frames after its
        cursor, at most ``limit`` per run, each run's in frame order."""
        rows: list[Any] = []
        for run_id, after in cursors.items():
            c.execute(self.q("SELECT run_id, frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? "
                             "AND frame_id > ? ORDER BY frame_id LIMIT ?"), (run_id, after, limit))
            rows.extend(c.fetchall())
        return rows

    def strip_frames(self, c: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Replace these frames' data with their skeletons: rows of (data, run_id, frame_id)."""
        self.update_rows(c, "{frames}", ("data", "run_id", "frame_id"), rows, ("run_id", "frame_id"),
                         "superseded = 1")

    # The recorders provide these (eventsourcing).
    def _insert_tracking(self, c: Any, tracking: Any) -> None: ...  # pragma: no cover
    def _max_tracking_id(self, application_name: str, c: Any) -> int | None: ...  # pragma: no cover

    def positions(self, c: Any, names: Sequence[str]) -> dict[str, int | None]:
        """Each partition's recorded position (``None``: nothing recorded yet)."""
        return {name: self._max_tracking_id(name, c) for name in names}

    def record_positions(self, c: Any, trackings: Sequence[Tracking]) -> None:
        """Record these partitions' positions (forward only: one that does not move
        forward fails the transaction with ``IntegrityError``)."""
        for tracking in trackings:
            self._insert_tracking(c, tracking)

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Any]:
        with self.datastore.transaction(commit=commit) as c:  # type: ignore[attr-defined]
            yield c

    @contextmanager
    def pipelined(self) -> Iterator[Any]:
        """A write transaction whose statements need not each wait for the server (see the
        PostgreSQL recorder); elsewhere an ordinary one."""
        with self.transaction(commit=True) as c:
            yield c

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A cursor for reads (see :func:`services.common.eventstore.reading`). On PostgreSQL
        each statement sees its own snapshot, as it did inside a read-committed transaction."""
        with reading(self.datastore) as c:  # type: ignore[attr-defined]
            yield c

    def notify(self, c: Any, origin: str, run_ids: Sequence[str]) -> None:
        """Announce changed runs to every listening instance, on commit (PostgreSQL)."""

    def lock_positions(self, c: Any, names: Sequence[str]) -> None:
        """Hold these partitions' positions until the transaction ends (PostgreSQL; SQLite
        has one writer at a time anyway)."""


class SQLiteDeliveryRecorder(SQLiteTrackingRecorder, DeliveryTables):
    prefix = "delivery"

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)

    def table_names(self) -> dict[str, str]:
        p = self.prefix
        return {"runs": f"{p}_runs", "blocks": f"{p}_blocks", "frames": f"{p}_frames",
                "conflicts": f"{p}_conflicts", "views": f"{p}_views", "runs_index": f"{p}_runs_conversation",
                "frames_index": f"{p}_frames_key", "tickets": f"{p}_stream_tickets"}

    def columns(self, c: Any, table: str) -> set[str]:
        c.execute(f"PRAGMA table_info({self.prefix}_{table})")
        return {row["name"] for row in c.fetchall()}

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.ddl()]


class PostgresDeliveryRecorder(PostgresTrackings, PostgresTrackingRecorder, DeliveryTables):
    placeholder = "%s"
    lock_suffix = " FOR UPDATE"

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str = "delivery_tracking",
                 **kwargs: Any) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.prefix = tracking_table_name.removesuffix("_tracking") or "delivery"
        if not _IDENT.match(self.prefix) or not _IDENT.match(self.datastore.schema):
            raise ValueError(f"unsafe table prefix or schema: {self.prefix!r} {self.datastore.schema!r}")
        self.sql_create_statements.extend(SQL(s) for s in self.ddl())  # type: ignore[arg-type]
        self._prepare_trackings()
        digest = hashlib.sha256(f"{self.datastore.schema}.{self.prefix}".encode()).hexdigest()[:20]
        self.channel = f"imprint_delivery_{digest}"

    def table_names(self) -> dict[str, str]:
        s, p = self.datastore.schema, self.prefix
        return {"runs": f'"{s}"."{p}_runs"', "blocks": f'"{s}"."{p}_blocks"', "frames": f'"{s}"."{p}_frames"',
                "conflicts": f'"{s}"."{p}_conflicts"', "views": f'"{s}"."{p}_views"',
                "runs_index": f"{p}_runs_conversation", "frames_index": f"{p}_frames_key",
                "tickets": f'"{s}"."{p}_stream_tickets"'}

    def columns(self, c: Any, table: str) -> set[str]:
        c.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                  (self.datastore.schema, f"{self.prefix}_{table}"))
        return {row["column_name"] for row in c.fetchall()}

    def values(self, rows: int, width: int) -> str:
        # PostgreSQL's own numbered placeholders, executed by a RawCursor: psycopg then
        # does not parse the statement to find them (it caches that parse only up to 50
        # parameters, and parsing long multi-row statements was 22% of Delivery's CPU).
        return ", ".join("(" + ", ".join(f"${r * width + i + 1}" for i in range(width)) + ")" for r in range(rows))

    def execute_values(self, c: Any, statement: str, params: Sequence[Any]) -> None:
        with psycopg.RawCursor(c.connection) as raw:
            raw.execute(self.q(statement), params)

    def frames_after_many(self, c: Any, cursors: Mapping[str, int], limit: int) -> list[Any]:
        # One statement for every run (the primary key's range scan per run, under LATERAL).
        c.execute(self.q("SELECT f.run_id, f.frame_id, f.event, f.data, f.body_sha256"
                         " FROM unnest(%s::text[], %s::bigint[]) AS w(run_id, after) CROSS JOIN LATERAL"
                         " (SELECT run_id, frame_id, event, data, body_sha256 FROM {frames}"
                         "  WHERE run_id = w.run_id AND frame_id > w.after ORDER BY frame_id LIMIT %s) AS f"
                         " ORDER BY f.run_id, f.frame_id"),
                  (list(cursors), list(cursors.values()), limit), prepare=True)
        return c.fetchall()

    def positions(self, c: Any, names: Sequence[str]) -> dict[str, int | None]:
        return self._max_tracking_ids(c, names)

    def record_positions(self, c: Any, trackings: Sequence[Tracking]) -> None:
        self._insert_trackings(c, trackings)

    @contextmanager
    def pipelined(self) -> Iterator[Any]:
        """A write transaction in psycopg's pipeline mode: each statement is sent without
        waiting for the one before, and the server is waited for only where a result is
        read (the positions, the run rows, the tracking guard) and at COMMIT, which goes
        with the last writes. A poll of one proposal was about a dozen round trips to the
        server, one after the other (BEGIN, a lock and a position per partition, the runs,
        the frames, the blocks, the runs again, a tracking record per partition, the
        NOTIFY, COMMIT); it is now four (five when its blocks are not held in memory). An
        error is raised where the server's answer is next read, and the transaction is
        rolled back as before. It costs psycopg's pipeline bookkeeping per statement: ~0.1
        ms of CPU more for a poll of one proposal (``docs/scaling.md``)."""
        with self.datastore.get_connection() as conn, conn.pipeline(), conn.transaction():
            yield conn.cursor()

    def notify(self, c: Any, origin: str, run_ids: Sequence[str]) -> None:
        for payload in notify_payloads(origin, run_ids):
            c.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))

    def lock_positions(self, c: Any, names: Sequence[str]) -> None:
        # During a rebalance the old and the new owner of a partition may apply
        # overlapping polls at once; the second must read the position only after the
        # first committed, or it would apply the overlap again. A transaction-scoped
        # advisory lock per partition, taken in one order before any run row lock.
        for name in sorted(names):
            key = int.from_bytes(hashlib.sha256(f"{self.channel}|{name}".encode()).digest()[:8], "big", signed=True)
            c.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


def _parts(rows: Sequence[Sequence[Any]]) -> Iterator[Sequence[Sequence[Any]]]:
    """``rows`` in statements of at most :data:`ROWS_PER_STATEMENT`."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        yield rows[start:start + ROWS_PER_STATEMENT]


def _flat(rows: Sequence[Sequence[Any]]) -> list[Any]:
    return [value for row in rows for value in row]


def notify_payloads(origin: str, run_ids: Sequence[str]) -> list[str]:
    """``{"origin": …, "runs": [...]}`` payloads, each under PostgreSQL's size cap."""
    payloads: list[str] = []
    chunk: list[str] = []
    size = 0
    for run_id in run_ids:
        cost = len(json.dumps(run_id)) + 1
        if chunk and size + cost > NOTIFY_PAYLOAD_BYTES:
            payloads.append(json.dumps({"origin": origin, "runs": chunk}))
            chunk, size = [], 0
        chunk.append(run_id)
        size += cost
    if chunk:
        payloads.append(json.dumps({"origin": origin, "runs": chunk}))
    return payloads


ConflictListener = Callable[[merge.Conflict], None]


class ViewStore:
    """The delivery projection. Synchronous: call it from a worker thread in async code."""

    def __init__(self, settings: Settings, *, name: str = "delivery") -> None:
        if not _IDENT.match(name):
            raise ValueError(f"unsafe store name {name!r}")
        env = Environment(name=name, env=store_environment(settings, name))
        self._factory = InfrastructureFactory.construct(env)
        recorder_class = PostgresDeliveryRecorder if settings.uses_postgres else SQLiteDeliveryRecorder
        self.recorder: DeliveryTables = self._factory.tracking_recorder(recorder_class)  # type: ignore[arg-type]
        self.listeners: list[ConflictListener] = []
        self.origin = uuid.uuid4().hex
        """Names this process in its own notifications (it wakes its feeds directly)."""
        self.hot = _HotRuns(HOT_BLOCKS)
        self._upgrade()

    def close(self) -> None:
        self._factory.close()

    @property
    def channel(self) -> str | None:
        return self.recorder.channel

    # ------------------------------------------------------------------ writing

    def process(self, batch: Sequence[Inbound]) -> list[str]:
        """Apply a poll in one transaction with its tracking records. Returns the run ids
        whose streams changed: new frames, or a deletion (wake the feeds with them after
        this returns; other instances hear it through NOTIFY)."""
        r = self.recorder
        fresh: list[Inbound] = []
        with r.pipelined() as c:
            names = sorted({item.tracking.application_name for item in batch})
            r.lock_positions(c, names)
            positions = r.positions(c, names)
            for item in batch:
                name = item.tracking.application_name
                recorded = positions[name]
                if recorded is not None and item.offset <= recorded:
                    continue  # redelivered: already applied with its frames
                positions[name] = item.offset
                fresh.append(item)
            # A run's closed record waits for the publication messages polled with it
            # (the topics are not ordered against each other).
            ordered = [i for i in fresh if not isinstance(i.message, RunClosed)]
            ordered += [i for i in fresh if isinstance(i.message, RunClosed)]
            work = _Work(self, c)
            # Lock every run of the batch up front, in one order, so two consumers
            # sharing runs (publication and runs partitions) cannot deadlock; fetch the
            # blocks each run's messages name, and only those.
            named: dict[str, set[str] | None] = {}
            for item in ordered:
                run_id = getattr(item.message, "run_id", None)
                if run_id:
                    named[run_id] = _union(named.get(run_id, set()), merge.named_blocks(item.message))
            work.load(list(named))
            for run_id in sorted(named):
                work.blocks(work.run(run_id), named[run_id])
            for item in ordered:
                run_id = getattr(item.message, "run_id", None)
                if not run_id:
                    continue
                run = work.run(run_id)
                work.blocks(run, merge.named_blocks(item.message))
                result = step(run.projection, item.message)
                run.dirty = True
                if result.purge_conversation is not None:
                    work.flush()
                    work.forget()
                    for purged in self._purge(c, result.purge_conversation, run.projection.account_id):
                        work.touched[purged] = None
                        self.hot.drop(purged)
                    continue
                work.append(run, result.drafts, result.conflicts)
                if result.terminal:
                    work.terminal(run)
                for block_id in result.hidden_after_terminal:
                    work.flush_frames()
                    self._strip(c, run_id, f"block:{block_id}", reason="withdrawn")
            work.flush()
            advanced = {i.tracking.application_name for i in fresh}
            r.record_positions(c, [Tracking(application_name=name, notification_id=offset)
                                   for name, offset in positions.items() if offset is not None and name in advanced])
            touched = list(work.touched)
            if touched:
                r.notify(c, self.origin, touched)
        self.hot.keep(work.runs.values())  # committed: these copies are the stored rows now
        for conflict in work.conflicts:
            log.warning("protocol conflict", run_id=conflict.run_id, block_id=conflict.block_id,
                        revision=conflict.revision, first=conflict.first_kind, second=conflict.second_kind)
            for listener in self.listeners:
                listener(conflict)
        return touched

    # --- stream tickets (D6), shared by every Delivery instance ----------------------------

    def issue_ticket(self, digest: str, account_id: str, run_id: str, expires_at: float) -> None:
        """Hold a stream ticket's hash for (account, run) until ``expires_at`` (epoch seconds)."""
        r = self.recorder
        with r.transaction(commit=True) as c:
            c.execute(r.q("DELETE FROM {tickets} WHERE expires_at <= ?"), (expires_at - 3600,))
            c.execute(r.q("INSERT INTO {tickets} (digest, account_id, run_id, expires_at) VALUES (?, ?, ?, ?)"),
                      (digest, account_id, run_id, expires_at))

    def use_ticket(self, digest: str, run_id: str, now: float, ttl: float) -> str | None:
        """The account of a live ticket for ``run_id``; each use extends its life by ``ttl``."""
        r = self.recorder
        with r.transaction(commit=True) as c:
            # One statement that both extends the ticket and names its account: the cursors
            # of both backends return rows, and neither need expose a row count.
            c.execute(r.q("UPDATE {tickets} SET expires_at = ? WHERE digest = ? AND run_id = ? AND expires_at > ? "
                          "RETURNING account_id"), (now + ttl, digest, run_id, now))
            row = c.fetchone()
        return None if row is None else row["account_id"]

    def record_delivery(self, run_id: str, outcome: str) -> None:
        """D4/D5: ``completed`` (sticky) or ``interrupted`` for the run's delivery."""
        self.record_deliveries({run_id: outcome})

    def record_deliveries(self, outcomes: Mapping[str, str]) -> None:
        """D4/D5: the delivery outcome of several runs, in one transaction; ``completed``
        stays ``completed`` whatever is recorded after it."""
        for outcome in outcomes.values():
            if outcome not in ("completed", "interrupted"):
                raise ValueError(outcome)
        r = self.recorder
        now = _now()
        with r.transaction(commit=True) as c:
            c.executemany(r.q("UPDATE {runs} SET delivery = CASE WHEN delivery = 'completed' THEN 'completed' "
                              "ELSE ? END, updated_at = ? WHERE run_id = ?"),
                          [(outcome, now, run_id) for run_id, outcome in sorted(outcomes.items())])

    def purge_conversation(self, conversation_id: str, account_id: str | None = None) -> list[str]:
        """X8: drop every private body of the conversation's runs (frames' markdown and
        text, answer text, block states). Returns the purged run ids."""
        with self.recorder.transaction(commit=True) as c:
            purged = self._purge(c, conversation_id, account_id)
            if purged:
                self.recorder.notify(c, self.origin, purged)
            return purged

    # ------------------------------------------------------------------ reading

    def frames_after(self, run_id: str, last_id: int, limit: int = 1000) -> list[Frame]:
        r = self.recorder
        with r.reading() as c:
            return self._frames_after(c, run_id, last_id, limit)

    def read_feeds(self, cursors: Mapping[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        """The live feeds' read after a wake-up, for every woken run at once: each run's
        frames after its cursor (at most ``limit``), then the runs' states. A batch that
        touched fifty followed runs costs one read, not fifty (on PostgreSQL two
        statements: one for every run's frames, one for their states)."""
        r = self.recorder
        ids = list(cursors)
        frames: dict[str, list[Frame]] = {run_id: [] for run_id in ids}
        with r.reading() as c:
            for row in r.frames_after_many(c, {run_id: int(cursors[run_id]) for run_id in ids}, int(limit)):
                frames[row["run_id"]].append(_frame(row))
            found = self._run_rows(c, ids, "run_id, deleted, terminal_frame_id, last_frame_id")
        reads: dict[str, FeedRead] = {}
        for run_id in ids:
            row = found.get(run_id)
            reads[run_id] = (
                FeedRead(frames[run_id], exists=False, deleted=False, terminal=False, last_frame_id=0) if row is None
                else FeedRead(frames[run_id], exists=True, deleted=bool(row["deleted"]),
                              terminal=row["terminal_frame_id"] is not None, last_frame_id=int(row["last_frame_id"])))
        return reads

    def heads(self, run_ids: Sequence[str]) -> dict[str, tuple[int, bool]]:
        """``{run_id: (last_frame_id, deleted)}`` of the given runs, in one query (the
        feeds' fallback check when no wake-up arrived)."""
        if not run_ids:
            return {}
        with self.recorder.reading() as c:
            rows = self._run_rows(c, list(run_ids), "run_id, last_frame_id, deleted")
        return {run_id: (int(row["last_frame_id"]), bool(row["deleted"])) for run_id, row in rows.items()}

    def _run_rows(self, c: Any, run_ids: Sequence[str], columns: str) -> dict[str, Any]:
        """These columns of the runs rows of ``run_ids`` (those that exist), by run id."""
        found: dict[str, Any] = {}
        for start in range(0, len(run_ids), 500):
            part = run_ids[start:start + 500]
            marks = ", ".join("?" for _ in part)
            c.execute(self.recorder.q(f"SELECT {columns} FROM {{runs}} WHERE run_id IN ({marks})"), tuple(part))
            found.update((row["run_id"], row) for row in c.fetchall())
        return found

    def run(self, run_id: str) -> RunRecord | None:
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT * FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return _record(row) if row is not None else None

    def answer_view(self, run_id: str) -> dict[str, Any] | None:
        """``{"blocks": [...in ordinal order, withdrawn omitted], "conflicts": [...]}``."""
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT deleted FROM {runs} WHERE run_id = ?"), (run_id,))
            run = c.fetchone()
            if run is None:
                return None
            if run["deleted"]:
                return {"blocks": [], "conflicts": []}
            c.execute(r.q("SELECT state FROM {blocks} WHERE run_id = ?"), (run_id,))
            states = [row["state"] for row in c.fetchall()]
            c.execute(r.q("SELECT block_id, revision FROM {conflicts} WHERE run_id = ? ORDER BY seq"), (run_id,))
            conflicts = [{"block_id": row["block_id"], "revision": int(row["revision"])} for row in c.fetchall()]
        shown = (merge.display(merge.BlockState.model_validate_json(state)) for state in states)
        blocks = sorted((entry for entry in shown if entry is not None),
                        key=lambda e: (e["delivery_ordinal"], e["block_id"]))
        return {"blocks": blocks, "conflicts": conflicts}

    def history(self, conversation_id: str) -> list[RunRecord]:
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT * FROM {runs} WHERE conversation_id = ? ORDER BY first_seen, run_id"),
                      (conversation_id,))
            rows = c.fetchall()
        return [_record(row) for row in rows]

    def answer_text(self, run_id: str) -> str | None:
        """The closed record's answer text (private; gone after deletion)."""
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT projection FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return json.loads(row["projection"]).get("answer_text") if row is not None else None

    def conflicts(self, run_id: str) -> list[dict[str, Any]]:
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT * FROM {conflicts} WHERE run_id = ? ORDER BY seq"), (run_id,))
            return [dict(row) for row in c.fetchall()]

    def position(self, topic: str, partition: int) -> int | None:
        """The last Kafka offset applied for this topic partition (resume point)."""
        return self.recorder.max_tracking_id(f"{topic}#{partition}")  # type: ignore[attr-defined]

    def ping(self) -> bool:
        r = self.recorder
        with r.reading() as c:
            c.execute(r.q("SELECT COUNT(*) AS n FROM {runs} WHERE run_id = ?"), ("",))
            c.fetchone()
        return True

    def _upgrade(self) -> None:
        """A store written in the earlier layout (each run's whole answer state in one
        ``views`` row, rewritten per batch) moves to the appending layout in place, once:
        block rows from the answer states, each key's live frame from the frames that
        still have a body, conflicts numbered in detection order. Frames, ids, positions
        and delivery states stay as they are."""
        r = self.recorder
        with r.transaction(commit=True) as c:
            if "version" not in r.columns(c, "runs"):
                c.execute(r.q("ALTER TABLE {runs} ADD COLUMN version BIGINT NOT NULL DEFAULT 0"))
            if "display" in r.columns(c, "blocks"):  # derived from the state when read, no longer stored
                c.execute(r.q("ALTER TABLE {blocks} DROP COLUMN display"))
            if "live_frames" in r.columns(c, "runs"):
                return
            log.info("upgrading the delivery view store to the appending layout")
            c.execute(r.q("ALTER TABLE {runs} ADD COLUMN live_frames TEXT NOT NULL DEFAULT '{{}}'"))
            c.execute(r.q("ALTER TABLE {runs} ADD COLUMN conflict_count BIGINT NOT NULL DEFAULT 0"))
            live: dict[tuple[str, str], tuple[int, str]] = {}
            c.execute(r.q("SELECT run_id, frame_id, event, data, body_sha256, skey FROM {frames} "
                          "WHERE superseded = 0 AND skey IS NOT NULL ORDER BY run_id, frame_id"))
            for row in c.fetchall():
                live[(row["run_id"], row["skey"])] = (int(row["frame_id"]), json.dumps(
                    skeleton(row["event"], json.loads(row["data"]), row["body_sha256"]), ensure_ascii=False))
            now, block_rows = _now(), []
            if "state" in r.columns(c, "views"):
                c.execute(r.q("SELECT run_id, state FROM {views}"))
                for row in c.fetchall():
                    answer = merge.AnswerState.model_validate_json(row["state"])
                    for block_id, state in answer.blocks.items():
                        frame_id, frame_skeleton = live.get((row["run_id"], f"block:{block_id}"), (None, None))
                        block_rows.append((row["run_id"], block_id, state.model_dump_json(), frame_id,
                                           frame_skeleton, now))
            if block_rows:
                r.insert_rows(c, "{blocks}", BLOCK_COLUMNS, block_rows)
            run_keys: dict[str, dict[str, list[Any]]] = {}
            for (run_id, key), (frame_id, frame_skeleton) in live.items():
                if not key.startswith("block:"):
                    run_keys.setdefault(run_id, {})[key] = [frame_id, frame_skeleton]
            if run_keys:
                c.executemany(r.q("UPDATE {runs} SET live_frames = ? WHERE run_id = ?"),
                              [(json.dumps(keys), run_id) for run_id, keys in run_keys.items()])
            if "seq" not in r.columns(c, "conflicts"):
                c.execute(r.q("SELECT * FROM {conflicts} ORDER BY run_id, detected_at"))
                rows = [dict(row) for row in c.fetchall()]
                c.execute(r.q("DROP TABLE {conflicts}"))
                for statement in self.recorder.ddl():
                    if "{conflicts}".format(**r.table_names()) in statement and "CREATE TABLE" in statement:
                        c.execute(statement)
                counts: dict[str, int] = {}
                for row in rows:
                    counts[row["run_id"]] = counts.get(row["run_id"], 0) + 1
                    row["seq"] = counts[row["run_id"]]
                if rows:
                    c.executemany(r.q("INSERT INTO {conflicts} (run_id, seq, block_id, revision, first_kind, "
                                      "first_sha256, second_kind, second_sha256, frame_id, detected_at) "
                                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                                  [(x["run_id"], x["seq"], x["block_id"], x["revision"], x["first_kind"],
                                    x["first_sha256"], x["second_kind"], x["second_sha256"], x["frame_id"],
                                    x["detected_at"]) for x in rows])
                c.executemany(r.q("UPDATE {runs} SET conflict_count = ? WHERE run_id = ?"),
                              [(n, run_id) for run_id, n in counts.items()])
            c.execute(r.q("DROP TABLE IF EXISTS {views}"))

    # ------------------------------------------------------------------ internals

    def _frames_after(self, c: Any, run_id: str, last_id: int, limit: int) -> list[Frame]:
        return [_frame(row) for row in self.recorder.frames_after_many(c, {run_id: int(last_id)}, int(limit))]

    def _strip(self, c: Any, run_id: str, key: str, *, reason: str) -> None:
        """Replace the bodies of every frame of a key with skeletons (ids and hashes stay)."""
        r = self.recorder
        c.execute(r.q("SELECT frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? AND skey = ?"),
                  (run_id, key))
        updates = [(_json(skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason=reason)),
                    run_id, row["frame_id"]) for row in c.fetchall()]
        if updates:
            r.strip_frames(c, updates)

    def _purge(self, c: Any, conversation_id: str, account_id: str | None) -> list[str]:
        r = self.recorder
        query = "SELECT run_id FROM {runs} WHERE conversation_id = ?"
        params: tuple[Any, ...] = (conversation_id,)
        if account_id is not None:
            query += " AND account_id = ?"
            params += (account_id,)
        c.execute(r.q(query + " ORDER BY run_id"), params)
        run_ids = [row["run_id"] for row in c.fetchall()]
        marks = ", ".join("?" for _ in PRIVATE_FRAME_EVENTS)
        for run_id in run_ids:
            work = _Work(self, c)
            run = work.run(run_id)
            p = run.projection
            p.deleted = True
            p.answer_text = None
            p.evidence = []
            run.dirty = True
            work.flush()
            c.execute(r.q("DELETE FROM {blocks} WHERE run_id = ?"), (run_id,))
            c.execute(r.q(f"SELECT frame_id, event, data, body_sha256 FROM {{frames}} WHERE run_id = ? "
                          f"AND event IN ({marks})"), (run_id, *PRIVATE_FRAME_EVENTS))
            updates = [(_json(skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason="purged")),
                        run_id, row["frame_id"]) for row in c.fetchall()]
            if updates:
                r.strip_frames(c, updates)
        if run_ids:
            log.info("conversation purged", conversation_id=conversation_id, runs=len(run_ids))
        return run_ids


def _union(have: set[str] | None, more: tuple[str, ...] | None) -> set[str] | None:
    if have is None or more is None:
        return None
    return have | set(more)


# ---------------------------------------------------------------------- one batch's work


@dataclass
class _Block:
    """A block row as loaded: its state (as stored, to see whether it changed) and its live frame."""

    stored: str | None
    frame_id: int | None
    frame_skeleton: str | None

    def __post_init__(self) -> None:
        self.stored_frame_id = self.frame_id

    def changed(self, state: str) -> bool:
        return state != self.stored or self.frame_id != self.stored_frame_id


@dataclass
class _Run:
    projection: RunProjection
    last_frame_id: int
    conflict_count: int
    live: dict[str, list[Any]]
    """Run-level keys (``run-status``, ``progress``) → [live frame id, its skeleton]."""
    version: int
    """The run row's version these rows were read at (or written as)."""
    rows: dict[str, _Block] = field(default_factory=dict)
    """Loaded block rows (a name loaded and absent has ``stored`` None)."""
    all_blocks: bool = False
    """Every block row of the run is in ``rows`` (a name not there is a new block)."""
    dirty: bool = False
    touched: set[str] | None = field(default_factory=set)
    """The blocks this batch's messages named (``None``: all of them): only these are written."""


class _HotRuns:
    """The runs committed batches left in memory, least recently used first. A batch
    takes a run out (the copy is then its own to change) and gives it back after its
    commit; a run that was not given back (a failed transaction) is read again."""

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._blocks = 0

    def take(self, run_id: str, version: int) -> _Run | None:
        """The cached run if it is the stored version (``None`` otherwise; a stale copy is dropped)."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return None
        self._blocks -= len(run.rows)
        return run if run.version == version else None

    def drop(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._blocks -= len(run.rows)

    def keep(self, runs: Iterable[_Run]) -> None:
        for run in runs:
            self.drop(run.projection.run_id)
            if run.projection.terminal or run.projection.deleted:
                continue  # done: at most a late withdrawal follows, which reads the run again
            self._runs[run.projection.run_id] = run
            self._blocks += len(run.rows)
        while self._blocks > self.max_blocks and self._runs:
            _, oldest = self._runs.popitem(last=False)
            self._blocks -= len(oldest.rows)

    def __len__(self) -> int:
        return len(self._runs)


class _Work:
    """The rows one batch reads and writes, collected so each is written once."""

    def __init__(self, store: ViewStore, c: Any) -> None:
        self.store = store
        self.r = store.recorder
        self.c = c
        self.runs: dict[str, _Run] = {}
        self.touched: dict[str, None] = {}
        self.conflicts: list[merge.Conflict] = []
        self.inserts: list[list[Any]] = []
        """Pending frame rows: run_id, frame_id, event, data, body_sha256, skey, superseded, created_at."""
        self.pending: dict[tuple[str, str], int] = {}
        """(run_id, key) → index in ``inserts`` of the key's newest pending frame."""
        self.strips: list[tuple[str, str, int]] = []
        self.conflict_rows: list[tuple[Any, ...]] = []
        self.now = _now()
        """The time of every row this batch writes (one transaction: one moment)."""

    # -------------------------------------------------------------- loading

    def run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            self.load([run_id])
            run = self.runs[run_id]
        return run

    def load(self, run_ids: Sequence[str]) -> None:
        """Lock and read these runs' rows in one statement, in run id order, then create the
        missing ones in that order (so two instances sharing runs cannot deadlock). A run
        held in memory at the stored version is taken as it is; only the others are parsed."""
        r, c = self.r, self.c
        wanted = sorted(run_id for run_id in set(run_ids) if run_id not in self.runs)
        columns = "run_id, projection, last_frame_id, live_frames, conflict_count, version"
        found: dict[str, Any] = {}
        for start in range(0, len(wanted), 400):
            part = wanted[start:start + 400]
            marks = ", ".join("?" for _ in part)
            c.execute(r.q(f"SELECT {columns} FROM {{runs}} WHERE run_id IN ({marks}) ORDER BY run_id"
                          + r.lock_suffix), part)
            found.update((row["run_id"], row) for row in c.fetchall())
        for run_id in wanted:
            row = found.get(run_id)
            if row is None:
                now = self.now
                fresh = RunProjection.new(run_id)
                c.execute(r.q("INSERT INTO {runs} (run_id, projection, first_seen, updated_at) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (run_id) DO NOTHING RETURNING run_id"),
                          (run_id, fresh.model_dump_json(exclude={"answer"}), now, now))
                if c.fetchone() is not None:  # ours, and locked until this batch commits: it has no blocks yet
                    self.runs[run_id] = _Run(fresh, 0, 0, {}, 0, all_blocks=True)
                    continue
                c.execute(r.q(f"SELECT {columns} FROM {{runs}} WHERE run_id = ?" + r.lock_suffix), (run_id,))
                row = c.fetchone()
            hot = self.store.hot.take(run_id, int(row["version"]))
            if hot is not None:
                self.runs[run_id] = hot
                continue
            data = json.loads(row["projection"])
            projection = RunProjection.model_validate({**data, "answer": merge.AnswerState(run_id=run_id)})
            self.runs[run_id] = _Run(projection, int(row["last_frame_id"]), int(row["conflict_count"]),
                                     json.loads(row["live_frames"] or "{}"), int(row["version"]))

    def blocks(self, run: _Run, names: set[str] | tuple[str, ...] | None) -> None:
        """Make sure the run's answer state holds these blocks (``None``: all of them)."""
        if names is None:
            run.touched = None
        elif run.touched is not None:
            run.touched.update(names)
        if run.all_blocks:
            return
        r, c, run_id = self.r, self.c, run.projection.run_id
        if names is None:
            c.execute(r.q("SELECT block_id, state, frame_id, frame_skeleton FROM {blocks} WHERE run_id = ?"),
                      (run_id,))
            run.all_blocks = True
            self._adopt(run, c.fetchall(), skip_loaded=True)
            return
        missing = sorted(n for n in names if n not in run.rows)
        for start in range(0, len(missing), 400):
            part = missing[start:start + 400]
            marks = ", ".join("?" for _ in part)
            c.execute(r.q(f"SELECT block_id, state, frame_id, frame_skeleton FROM {{blocks}} "
                          f"WHERE run_id = ? AND block_id IN ({marks})"), (run_id, *part))
            self._adopt(run, c.fetchall(), skip_loaded=False)
            for name in part:
                run.rows.setdefault(name, _Block(None, None, None))

    def _adopt(self, run: _Run, rows: list[Any], *, skip_loaded: bool) -> None:
        for row in rows:
            block_id = row["block_id"]
            if skip_loaded and block_id in run.rows:
                continue
            run.rows[block_id] = _Block(row["state"], row["frame_id"], row["frame_skeleton"])
            run.projection.answer.blocks[block_id] = merge.BlockState.model_validate_json(row["state"])

    def forget(self) -> None:
        """Drop what was loaded (after a purge rewrote runs behind it)."""
        self.runs.clear()

    # -------------------------------------------------------------- frames

    def append(self, run: _Run, drafts: list[FrameDraft], conflicts: list[merge.Conflict]) -> None:
        run_id = run.projection.run_id
        error_frames: dict[tuple[str, int], int] = {}
        for draft in drafts:
            frame_id = self.frame(run, draft)
            if draft.event == "error":
                error_frames[(draft.data["block_id"], draft.data["revision"])] = frame_id
        for conflict in conflicts:
            run.conflict_count += 1
            self.conflict_rows.append((
                run_id, run.conflict_count, conflict.block_id, conflict.revision, conflict.first_kind,
                conflict.first_sha256, conflict.second_kind, conflict.second_sha256,
                error_frames.get((conflict.block_id, conflict.revision)), self.now))
            self.conflicts.append(conflict)
        if drafts:
            self.touched[run_id] = None

    def frame(self, run: _Run, draft: FrameDraft) -> int:
        run_id = run.projection.run_id
        run.last_frame_id += 1
        frame_id = run.last_frame_id
        data = _json(draft.data)
        if draft.key is not None:
            pending = self.pending.get((run_id, draft.key))
            if pending is not None:  # superseded within this batch: written as a skeleton
                row = self.inserts[pending]
                row[3] = _json(skeleton(row[2], json.loads(row[3]), row[4]))
                row[6] = 1
            else:
                live = self._live(run, draft.key)
                if live is not None and live[0] is not None:
                    self.strips.append((live[1], run_id, int(live[0])))
            self.pending[(run_id, draft.key)] = len(self.inserts)
            self._set_live(run, draft.key, frame_id,
                           _json(skeleton(draft.event, draft.data, draft.body_sha256)))
        self.inserts.append([run_id, frame_id, draft.event, data, draft.body_sha256, draft.key, 0, self.now])
        return frame_id

    def _live(self, run: _Run, key: str) -> tuple[int | None, str | None] | None:
        if key.startswith("block:"):
            block_id = key.removeprefix("block:")
            if block_id not in run.rows and run.all_blocks:  # a block new in this batch
                run.rows[block_id] = _Block(None, None, None)
            row = run.rows.get(block_id)
            if row is None:  # never happens: a block frame names a block its message named
                raise AssertionError(f"block frame {key} of {run.projection.run_id} without its block row")
            return row.frame_id, row.frame_skeleton
        live = run.live.get(key)
        return (int(live[0]), live[1]) if live else None

    def _set_live(self, run: _Run, key: str, frame_id: int, frame_skeleton: str) -> None:
        if key.startswith("block:"):
            row = run.rows[key.removeprefix("block:")]
            row.frame_id, row.frame_skeleton = frame_id, frame_skeleton
        else:
            run.live[key] = [frame_id, frame_skeleton]
        run.dirty = True

    def terminal(self, run: _Run) -> None:
        """``stream-summary`` over every semantic frame of the run, then ``done`` (once per run)."""
        r, c, run_id = self.r, self.c, run.projection.run_id
        self.flush_frames()
        c.execute(r.q("SELECT frame_id, event, body_sha256 FROM {frames} WHERE run_id = ? ORDER BY frame_id"),
                  (run_id,))
        rows = c.fetchall()
        if any(row["event"] in (SUMMARY, DONE) for row in rows):
            raise AssertionError(f"run {run_id} already has a terminal frame")
        semantic = [(int(row["frame_id"]), row["body_sha256"]) for row in rows]
        held: list[tuple[int, str, Any]] = [(i, "x", {"body_sha256": h}) for i, h in semantic]
        for draft in terminal_drafts(semantic):
            frame_id = self.frame(run, draft)
            held.append((frame_id, draft.event, draft.data))
        check = validate_stream(held)
        if not check.ok:  # never write a completion projection that a client would reject
            raise AssertionError(f"terminal of {run_id} does not validate: {check.problems}")
        self.flush_frames()
        c.execute(r.q("UPDATE {runs} SET terminal_frame_id = ? WHERE run_id = ?"), (run.last_frame_id, run_id))
        self.touched[run_id] = None

    # -------------------------------------------------------------- writing

    def flush_frames(self) -> None:
        r, c = self.r, self.c
        if self.strips:
            r.strip_frames(c, self.strips)
            self.strips = []
        if self.inserts:
            r.insert_rows(c, "{frames}", FRAME_COLUMNS, self.inserts)
            self.inserts = []
            self.pending = {}

    def flush(self) -> None:
        """Write every pending frame and every changed run and block row."""
        r, c, now = self.r, self.c, self.now
        self.flush_frames()
        if self.conflict_rows:
            c.executemany(r.q("INSERT INTO {conflicts} (run_id, seq, block_id, revision, first_kind, first_sha256, "
                              "second_kind, second_sha256, frame_id, detected_at) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"), self.conflict_rows)
            self.conflict_rows = []
        block_rows: list[tuple[Any, ...]] = []
        run_rows: list[tuple[Any, ...]] = []
        for run in self.runs.values():
            if not run.dirty:
                continue
            p = run.projection
            blocks = p.answer.blocks
            names = blocks if run.touched is None else sorted(n for n in run.touched if n in blocks)
            for block_id in names:
                state = blocks[block_id]
                row = run.rows.setdefault(block_id, _Block(None, None, None))
                stored = state.model_dump_json()
                if not row.changed(stored):
                    continue
                block_rows.append((p.run_id, block_id, stored, row.frame_id, row.frame_skeleton, now))
                row.stored, row.stored_frame_id = stored, row.frame_id
            run_rows.append((p.account_id, p.conversation_id, p.state, p.outcome, run.last_frame_id, int(p.deleted),
                             p.model_dump_json(exclude={"answer"}), _json(run.live), run.conflict_count, now,
                             p.run_id))
            run.version += 1
            run.dirty = False
            run.touched = set()
        if block_rows:
            r.insert_rows(c, "{blocks}", BLOCK_COLUMNS, block_rows, " ON CONFLICT (run_id, block_id) DO UPDATE SET "
                          "state = excluded.state, frame_id = excluded.frame_id, "
                          "frame_skeleton = excluded.frame_skeleton, updated_at = excluded.updated_at")
        if run_rows:
            r.update_rows(c, "{runs}", RUN_COLUMNS, run_rows, ("run_id",), "version = version + 1")


def _frame(row: Any) -> Frame:
    """A frame read back: its data parsed by pydantic-core, its stored JSON kept to be sent
    as it is (it was parsed and encoded again for every read: a sixth of Delivery's CPU at
    300 proposals/s paced)."""
    text = row["data"]
    return Frame(row["run_id"], int(row["frame_id"]), row["event"], from_json(text), row["body_sha256"], text=text)


def _record(row: Any) -> RunRecord:
    data = json.loads(row["projection"])
    return RunRecord(
        run_id=row["run_id"], account_id=row["account_id"], conversation_id=row["conversation_id"],
        message_id=data.get("message_id"), state=row["state"], outcome=row["outcome"],
        sequence=int(data.get("sequence") or 0), closed=bool(data.get("closed")),
        terminal=bool(data.get("terminal")), deleted=bool(row["deleted"]), delivery=row["delivery"],
        last_frame_id=int(row["last_frame_id"]), first_seen=row["first_seen"], reason=data.get("reason"),
    )

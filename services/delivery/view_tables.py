"""Delivery's tables, written once for every backend (on :class:`services.common.tables.Tables`).

``<p>_runs``      one row per run: identity, lifecycle, the live frame of its run-level keys
                  (``run-status``, ``progress``), its last frame id, its delivery state and a
                  ``version`` every write of its rows increments under the row's lock;
``<p>_blocks``    one row per block: its merged state and its live frame with its skeleton;
``<p>_frames``    every frame of every run, ids 1, 2, 3, … per run (D1), never deleted (a
                  superseded or purged frame keeps its id and hash, its body becomes a skeleton),
                  with the ``traceparent`` of the span that appended it when tracing is on (X9);
``<p>_conflicts`` protocol conflicts (P17), numbered per run;
``<p>_stream_tickets``  the hashes of live stream tickets (D6), shared by every instance, each
                  with what it opens (its ``run_id`` column: a run, or a conversation's
                  notices' feed key);
``<p>_tracking``  the Kafka position of each partition, recorded with the rows it caused;

and for D7 (notices after the end, who saw a withdrawn claim):

``<p>_conversations``  one row per conversation that was told something: its account, its
                  last notice id (ids 1, 2, 3, … per conversation, taken under the row's lock
                  in the poll that writes the notices) and whether it was deleted;
``<p>_notices``   every notice, as sent (never a title or body);
``<p>_conversation_entries``  the conversation stream (D9): every entry (a ``turn`` — one
                  question's place in the conversation — or a copy of a ``notice``), ids 1, 2,
                  3, … per conversation (its row's ``last_entry_id``), as sent;
``<p>_renders``   which client reported which block revision rendered, first time only;
``<p>_received``  how far each client reported a run's stream received;
``<p>_notice_receipts``  which client reported which notice received, first time only.

The last three are written when Delivery accepts a client receipt (``POST …/receipts``),
each row once: a client that reports the same render again adds nothing.

``<p>`` is the store's name (``delivery``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from imprint.delivery.rows import FRAME_ROW
from services.common.tables import Tables

FRAME_COLUMNS = FRAME_ROW
"""A frame row as a poll holds it pending (:data:`imprint.delivery.rows.FRAME_ROW`), written as it is."""
TRACED_FRAME_COLUMNS = (*FRAME_COLUMNS, "traceparent")
"""A traced poll's frame rows (tracing off: the column is left to its ``NULL``)."""
RUN_COLUMNS = ("account_id", "conversation_id", "state", "outcome", "last_frame_id", "deleted", "projection",
               "live_frames", "conflict_count", "updated_at", "run_id")
BLOCK_COLUMNS = ("run_id", "block_id", "state", "frame_id", "frame_skeleton", "updated_at")
CONFLICT_COLUMNS = ("run_id", "seq", "block_id", "revision", "first_kind", "first_sha256", "second_kind",
                    "second_sha256", "frame_id", "detected_at")
NOTICE_COLUMNS = ("conversation_id", "notice_id", "run_id", "block_id", "revision", "cause", "data", "created_at")
RENDER_COLUMNS = ("run_id", "block_id", "revision", "client_id", "rendered_at")
ENTRY_COLUMNS = ("conversation_id", "entry_id", "event", "data", "created_at")
ROWS_PER_STATEMENT = 500
"""Rows per multi-row ``VALUES`` statement (and ids per ``IN`` list)."""


class ViewTables:
    """Delivery's tables on one :class:`Tables`: their schema and the statements every
    reader and writer shares."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        p = tables.name
        self.table_names = {table: f"{p}_{table}"
                            for table in ("runs", "blocks", "frames", "conflicts", "views", "conversations")}
        """Each table's own name (unqualified), for the catalog."""
        self.names = {
            "runs": tables.table(f"{p}_runs"), "blocks": tables.table(f"{p}_blocks"),
            "frames": tables.table(f"{p}_frames"), "conflicts": tables.table(f"{p}_conflicts"),
            "tickets": tables.table(f"{p}_stream_tickets"), "views": tables.table(f"{p}_views"),
            "conversations": tables.table(f"{p}_conversations"), "notices": tables.table(f"{p}_notices"),
            "renders": tables.table(f"{p}_renders"), "received": tables.table(f"{p}_received"),
            "notice_receipts": tables.table(f"{p}_notice_receipts"),
            "entries": tables.table(f"{p}_conversation_entries"),
            "runs_index": f"{p}_runs_conversation", "frames_index": f"{p}_frames_key",
            "notices_index": f"{p}_notices_run",
        }
        tables.create(self.q(statement) for statement in SCHEMA)

    def q(self, statement: str) -> str:
        return self.tables.q(statement, self.names)

    def columns(self, c: Any, table: str) -> set[str]:
        """The columns ``table`` (``runs``, ``blocks``…) has now."""
        return self.tables.columns(c, self.table_names[table])

    def insert_rows(self, c: Any, into: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                    tail: str = "") -> None:
        """``INSERT INTO into (columns)`` many rows in one statement (a multi-row ``VALUES``
        list): one statement to parse and send instead of one per row."""
        for part in _parts(rows):
            self.tables.execute_values(c, self.q(
                f"INSERT INTO {into} ({', '.join(columns)}) VALUES "
                f"{self.tables.values(len(part), len(columns))}{tail}"), _flat(part))

    def update_rows(self, c: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                    keys: Sequence[str], also: str = "") -> None:
        """``UPDATE table`` many rows in one statement: each row gives ``columns`` (the
        ``keys`` among them select the row, the others are set), ``also`` adds fixed
        assignments (``"superseded = 1"``)."""
        sets = ", ".join([*(f"{name} = v.{name}" for name in columns if name not in keys), *([also] if also else [])])
        for part in _parts(rows):
            where = " AND ".join(f"{table}.{name} = v.{name}" for name in keys)
            self.tables.execute_values(c, self.q(
                f"WITH v ({', '.join(columns)}) AS (VALUES {self.tables.values(len(part), len(columns))}) "
                f"UPDATE {table} SET {sets} FROM v WHERE {where}"), _flat(part))

    def strip_frames(self, c: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Replace these frames' data with their skeletons: rows of (data, run_id, frame_id)."""
        self.update_rows(c, "{frames}", ("data", "run_id", "frame_id"), rows, ("run_id", "frame_id"),
                         "superseded = 1")

    def frames_after(self, c: Any, cursors: Mapping[str, int], limit: int, *, traced: bool = False) -> list[Any]:
        """Rows (run_id, frame_id, event, data, body_sha256, and ``traceparent`` when
        ``traced``) of each run's frames after its cursor, at most ``limit`` per run, in run
        and frame order — one statement for every run. Frame ids are dense per run and frames are never deleted, so "the next
        ``limit`` frames" is the id range ``(after, after + limit]``: each run's part is a
        range scan of the primary key."""
        columns = "f.event, f.data, f.body_sha256" + (", f.traceparent" if traced else "")
        return self._after(c, "{frames}", "run_id", "frame_id", columns, cursors, limit)

    def notices_after(self, c: Any, cursors: Mapping[str, int], limit: int) -> list[Any]:
        """Rows (conversation_id, notice_id, data) of each conversation's notices after its
        cursor, as :meth:`frames_after` reads frames (notice ids are dense per conversation,
        and notices are never deleted)."""
        return self._after(c, "{notices}", "conversation_id", "notice_id", "f.data", cursors, limit)

    def entries_after(self, c: Any, cursors: Mapping[str, int], limit: int) -> list[Any]:
        """Rows (conversation_id, entry_id, event, data) of each conversation stream after its
        cursor (D9), read as :meth:`notices_after` reads notices."""
        return self._after(c, "{entries}", "conversation_id", "entry_id", "f.event, f.data", cursors, limit)

    def _after(self, c: Any, table: str, key: str, number: str, columns: str, cursors: Mapping[str, int],
               limit: int) -> list[Any]:
        rows: list[Any] = []
        items = sorted(cursors.items())
        for start in range(0, len(items), ROWS_PER_STATEMENT):
            part = items[start:start + ROWS_PER_STATEMENT]
            values = ", ".join(["(?, CAST(? AS BIGINT))"] * len(part))
            c.execute(self.q(
                f"WITH w ({key}, after) AS (VALUES {values}) "
                f"SELECT f.{key}, f.{number}, {columns} FROM w JOIN {table} f"
                f" ON f.{key} = w.{key} AND f.{number} > w.after AND f.{number} <= w.after + ?"
                f" ORDER BY f.{key}, f.{number}"), [*(v for name, after in part for v in (name, after)), limit])
            rows.extend(c.fetchall())
        return rows

    def number_notices(self, c: Any, counts: Mapping[str, tuple[str, int]], stamp: str,
                       column: str = "last_notice_id") -> dict[str, int]:
        """D7 (and D9's entries, ``column="last_entry_id"``): take ``n`` more ids of each conversation (``counts``: conversation →
        (account, n)), under the conversation row's lock until the transaction ends (rows
        taken in conversation order, after the runs the poll locked). Returns each
        conversation's last id now (its new ids end there); a conversation whose row names
        another account (its runs' notices are never another account's) or that was deleted
        gets none."""
        last: dict[str, int] = {}
        items = sorted(counts.items())
        for start in range(0, len(items), ROWS_PER_STATEMENT):
            part = items[start:start + ROWS_PER_STATEMENT]
            c.execute(self.q(
                f"INSERT INTO {{conversations}} AS t (conversation_id, account_id, {column}, updated_at) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(part))
                + f" ON CONFLICT (conversation_id) DO UPDATE SET {column} = t.{column} + "
                  f"excluded.{column}, updated_at = excluded.updated_at"
                  " WHERE t.account_id = excluded.account_id AND t.deleted = 0"
                  f" RETURNING conversation_id, {column}"),
                [v for conversation, (account, n) in part for v in (conversation, account, n, stamp)])
            last.update((row["conversation_id"], int(row[column])) for row in c.fetchall())
        return last

    def close_conversation(self, c: Any, conversation_id: str, account_id: str | None, stamp: str) -> None:
        """X8: the conversation was deleted: its notices stream ends, and it takes no more."""
        c.execute(self.q("INSERT INTO {conversations} (conversation_id, account_id, deleted, updated_at) "
                         "VALUES (?, ?, 1, ?) ON CONFLICT (conversation_id) DO UPDATE SET deleted = 1, "
                         "updated_at = excluded.updated_at"), (conversation_id, account_id, stamp))

    def conversation_heads(self, c: Any, conversation_ids: Sequence[str]) -> dict[str, Any]:
        """(last_notice_id, last_entry_id, deleted) rows of these conversations (those told anything yet)."""
        found: dict[str, Any] = {}
        for start in range(0, len(conversation_ids), ROWS_PER_STATEMENT):
            part = list(conversation_ids[start:start + ROWS_PER_STATEMENT])
            marks = ", ".join("?" for _ in part)
            c.execute(self.q(f"SELECT conversation_id, last_notice_id, last_entry_id, deleted FROM {{conversations}} "
                             f"WHERE conversation_id IN ({marks})"), part)
            found.update((row["conversation_id"], row) for row in c.fetchall())
        return found

    def run_rows(self, c: Any, run_ids: Sequence[str], columns: str, *, lock: bool = False) -> dict[str, Any]:
        """These columns of the runs rows of ``run_ids`` (those that exist), by run id;
        ``lock``: held until the transaction ends, taken in run id order."""
        found: dict[str, Any] = {}
        ordered = sorted(run_ids) if lock else list(run_ids)
        for start in range(0, len(ordered), ROWS_PER_STATEMENT):
            part = ordered[start:start + ROWS_PER_STATEMENT]
            marks = ", ".join("?" for _ in part)
            c.execute(self.q(f"SELECT {columns} FROM {{runs}} WHERE run_id IN ({marks})"
                             + (" ORDER BY run_id" + self.tables.lock_suffix if lock else "")), part)
            found.update((row["run_id"], row) for row in c.fetchall())
        return found

    def conversation_runs(self, c: Any, conversation_id: str, account_id: str | None) -> list[str]:
        query = "SELECT run_id FROM {runs} WHERE conversation_id = ?"
        params: tuple[Any, ...] = (conversation_id,)
        if account_id is not None:
            query += " AND account_id = ?"
            params += (account_id,)
        c.execute(self.q(query + " ORDER BY run_id"), params)
        return [row["run_id"] for row in c.fetchall()]


SCHEMA = (
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
    " created_at TEXT NOT NULL, traceparent TEXT, PRIMARY KEY (run_id, frame_id))",
    "CREATE INDEX IF NOT EXISTS {frames_index} ON {frames} (run_id, skey)",
    "CREATE TABLE IF NOT EXISTS {conflicts} ("
    " run_id TEXT NOT NULL, seq BIGINT NOT NULL, block_id TEXT NOT NULL, revision BIGINT NOT NULL,"
    " first_kind TEXT NOT NULL, first_sha256 TEXT NOT NULL, second_kind TEXT NOT NULL,"
    " second_sha256 TEXT NOT NULL, frame_id BIGINT, detected_at TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS {tickets} ("
    " digest TEXT PRIMARY KEY, account_id TEXT NOT NULL, run_id TEXT NOT NULL,"
    " expires_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {conversations} ("
    " conversation_id TEXT PRIMARY KEY, account_id TEXT, last_notice_id BIGINT NOT NULL DEFAULT 0,"
    " deleted INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL, last_entry_id BIGINT NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS {entries} ("
    " conversation_id TEXT NOT NULL, entry_id BIGINT NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL,"
    " created_at TEXT NOT NULL, PRIMARY KEY (conversation_id, entry_id))",
    "CREATE TABLE IF NOT EXISTS {notices} ("
    " conversation_id TEXT NOT NULL, notice_id BIGINT NOT NULL, run_id TEXT NOT NULL, block_id TEXT NOT NULL,"
    " revision BIGINT NOT NULL, cause TEXT NOT NULL, data TEXT NOT NULL, created_at TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, notice_id))",
    "CREATE INDEX IF NOT EXISTS {notices_index} ON {notices} (run_id)",
    "CREATE TABLE IF NOT EXISTS {renders} ("
    " run_id TEXT NOT NULL, block_id TEXT NOT NULL, revision BIGINT NOT NULL, client_id TEXT NOT NULL,"
    " rendered_at TEXT NOT NULL, PRIMARY KEY (run_id, block_id, revision, client_id))",
    "CREATE TABLE IF NOT EXISTS {received} ("
    " run_id TEXT NOT NULL, client_id TEXT NOT NULL, last_event_id BIGINT NOT NULL, received_at TEXT NOT NULL,"
    " PRIMARY KEY (run_id, client_id))",
    "CREATE TABLE IF NOT EXISTS {notice_receipts} ("
    " run_id TEXT NOT NULL, notice_id BIGINT NOT NULL, client_id TEXT NOT NULL, received_at TEXT NOT NULL,"
    " PRIMARY KEY (run_id, notice_id, client_id))",
)


def _parts(rows: Sequence[Sequence[Any]]) -> Iterator[Sequence[Sequence[Any]]]:
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        yield rows[start:start + ROWS_PER_STATEMENT]


def _flat(rows: Sequence[Sequence[Any]]) -> list[Any]:
    return [value for row in rows for value in row]

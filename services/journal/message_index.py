"""The mutable message → execution lookup index (SPEC X4), as a small SQL table.

``<name>_message_index (conversation_id, message_id) → run_id``. It is a pointer
for convenience, written after the admission commits; reads go through
``imprint.journal.history.resolve_execution``, which verifies the execution's
immutable binding. Losing or clearing a row makes that message "not found" —
never a fallback. ``RuntimeJournal.rebuild_message_index`` re-derives the rows
from the conversation aggregates (e.g. after a crash between the commit and the
index write). Identifiers only; no private text.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from services.common.settings import Settings
from services.common.keyring import create_table_racing


class PostgresMessageIndex:
    def __init__(self, url: str, table: str, schema: str | None = None) -> None:
        from psycopg import sql
        from psycopg_pool import ConnectionPool

        self._sql = sql
        self._table = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        self._pool = ConnectionPool(url, min_size=1, max_size=4, open=True)
        create_table_racing(
            self._pool,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " conversation_id text NOT NULL, message_id text NOT NULL, run_id text NOT NULL,"
                " updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (conversation_id, message_id))"
            ).format(self._table),
        )

    def lookup(self, conversation_id: str, message_id: str) -> str | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                self._sql.SQL("SELECT run_id FROM {} WHERE conversation_id = %s AND message_id = %s").format(self._table),
                (conversation_id, message_id),
            ).fetchone()
        return row[0] if row else None

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                self._sql.SQL(
                    "INSERT INTO {} (conversation_id, message_id, run_id) VALUES (%s, %s, %s)"
                    " ON CONFLICT (conversation_id, message_id) DO UPDATE SET run_id = EXCLUDED.run_id, updated_at = now()"
                ).format(self._table),
                (conversation_id, message_id, run_id),
            )

    def clear(self, conversation_id: str, message_id: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                self._sql.SQL("DELETE FROM {} WHERE conversation_id = %s AND message_id = %s").format(self._table), (conversation_id, message_id)
            )

    def drop_conversation(self, conversation_id: str) -> None:
        with self._pool.connection() as conn:
            conn.execute(self._sql.SQL("DELETE FROM {} WHERE conversation_id = %s").format(self._table), (conversation_id,))

    def close(self) -> None:
        self._pool.close()


class SqliteMessageIndex:
    def __init__(self, path: str | Path, table: str) -> None:
        self._path = str(path)
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._table = '"' + table.replace('"', '""') + '"'
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=10)
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            " conversation_id TEXT NOT NULL, message_id TEXT NOT NULL, run_id TEXT NOT NULL,"
            " PRIMARY KEY (conversation_id, message_id))"
        )

    def lookup(self, conversation_id: str, message_id: str) -> str | None:
        with self._lock:
            row = self._conn.execute(f"SELECT run_id FROM {self._table} WHERE conversation_id = ? AND message_id = ?", (conversation_id, message_id)).fetchone()
        return row[0] if row else None

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None:
        with self._lock:
            self._conn.execute(
                f"INSERT INTO {self._table} (conversation_id, message_id, run_id) VALUES (?, ?, ?)"
                " ON CONFLICT (conversation_id, message_id) DO UPDATE SET run_id = excluded.run_id",
                (conversation_id, message_id, run_id),
            )

    def clear(self, conversation_id: str, message_id: str) -> None:
        with self._lock:
            self._conn.execute(f"DELETE FROM {self._table} WHERE conversation_id = ? AND message_id = ?", (conversation_id, message_id))

    def drop_conversation(self, conversation_id: str) -> None:
        with self._lock:
            self._conn.execute(f"DELETE FROM {self._table} WHERE conversation_id = ?", (conversation_id,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def open_message_index(settings: Settings, application: str = "journal") -> PostgresMessageIndex | SqliteMessageIndex:
    table = f"{application.lower()}_message_index"
    if settings.uses_postgres:
        assert settings.database_url is not None
        return PostgresMessageIndex(settings.database_url, table, schema=settings.database_schema)
    return SqliteMessageIndex(Path(settings.state_dir) / "data" / f"{application.lower()}_index.sqlite", table)

"""Per-conversation data keys for crypto-shredding (SPEC X8), outside the append-only logs.

One small *mutable* table, ``imprint_conversation_keys``::

    conversation_id  text PRIMARY KEY
    data_key         bytea / BLOB  NULL after destruction
    created_at       timestamp
    destroyed_at     timestamp     NULL until destroyed

Every private field of the journal (and, later, Publication's block bodies) is
stored only as AES-GCM ciphertext under the conversation's key. Deleting a
conversation (user request or retention) overwrites ``data_key`` with NULL and
sets ``destroyed_at``; the row stays as a marker, so a destroyed conversation
never gets a fresh key (``key_for(..., create=True)`` raises ``KeyDestroyed``).

Physical erasure of the old key bytes:

* PostgreSQL keeps the pre-update row version until VACUUM; call
  :meth:`PostgresKeyring.vacuum` (``VACUUM imprint_conversation_keys``) after a
  deletion sweep. WAL segments and base backups may still hold the key until they
  rotate out — size retention of WAL archives and backups accordingly.
* SQLite runs with ``PRAGMA secure_delete=ON`` and a rollback journal, so freed
  pages are zeroed when the NULL is written.

The backend follows :class:`services.common.settings.Settings` exactly like
``services.common.eventstore``: PostgreSQL when ``database_url`` is a
``postgresql://`` URL (in ``database_schema`` when set), otherwise an SQLite file
``<state_dir>/data/keyring.sqlite``. :class:`InMemoryKeyring` is for unit tests.

No cache: every read asks the table, so a key destroyed by one process is
unusable by every other process from the moment the UPDATE commits.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imprint.shredding import KeyDestroyed, Keyring, new_data_key
from services.common.settings import Settings

__all__ = ["InMemoryKeyring", "KeyDestroyed", "Keyring", "PostgresKeyring", "SqliteKeyring", "open_keyring"]

TABLE = "imprint_conversation_keys"


class InMemoryKeyring:
    """Dict-backed keyring for unit tests. Thread-safe."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes | None] = {}
        self._lock = threading.Lock()

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        with self._lock:
            if conversation_id in self._keys:
                key = self._keys[conversation_id]
                if key is None and create:
                    raise KeyDestroyed(conversation_id)
                return key
            if not create:
                return None
            key = self._keys[conversation_id] = new_data_key()
            return key

    def destroy(self, conversation_id: str) -> None:
        with self._lock:
            self._keys[conversation_id] = None

    def is_destroyed(self, conversation_id: str) -> bool:
        with self._lock:
            return conversation_id in self._keys and self._keys[conversation_id] is None

    def close(self) -> None:
        pass


def create_table_racing(pool: Any, statement: Any, attempts: int = 5) -> None:
    """``CREATE TABLE IF NOT EXISTS`` that tolerates another process creating the same table at the
    same moment (PostgreSQL then reports a duplicate row type or relation)."""
    import time

    import psycopg

    for attempt in range(attempts):
        try:
            with pool.connection() as conn:
                conn.execute(statement)
            return
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable, psycopg.errors.DuplicateObject):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


class PostgresKeyring:
    """psycopg 3 keyring. ``schema`` defaults to the connection's search path."""

    def __init__(self, url: str, schema: str | None = None, table: str = TABLE, pool_size: int = 4) -> None:
        from psycopg import sql
        from psycopg_pool import ConnectionPool

        self._sql = sql
        self._url = url
        self._table = sql.Identifier(schema, table) if schema else sql.Identifier(table)
        self._table_name = f"{schema}.{table}" if schema else table
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True, kwargs={"autocommit": False})
        create_table_racing(
            self._pool,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " conversation_id text PRIMARY KEY,"
                " data_key bytea NULL,"
                " created_at timestamptz NOT NULL DEFAULT now(),"
                " destroyed_at timestamptz NULL,"
                " CHECK (destroyed_at IS NULL OR data_key IS NULL))"
            ).format(self._table),
        )

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        sql = self._sql
        select = sql.SQL("SELECT data_key, destroyed_at FROM {} WHERE conversation_id = %s").format(self._table)
        with self._pool.connection() as conn:
            row = conn.execute(select, (conversation_id,)).fetchone()
            if row is None and create:  # the write happens once per conversation, not per lookup
                conn.execute(
                    sql.SQL("INSERT INTO {} (conversation_id, data_key) VALUES (%s, %s) ON CONFLICT (conversation_id) DO NOTHING").format(self._table),
                    (conversation_id, new_data_key()),
                )
                row = conn.execute(select, (conversation_id,)).fetchone()
        return _usable_key(conversation_id, row, create)

    def destroy(self, conversation_id: str) -> None:
        sql = self._sql
        with self._pool.connection() as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {t} AS k (conversation_id, data_key, destroyed_at) VALUES (%s, NULL, now())"
                    " ON CONFLICT (conversation_id) DO UPDATE"
                    " SET data_key = NULL, destroyed_at = COALESCE(k.destroyed_at, now())"
                ).format(t=self._table),
                (conversation_id,),
            )

    def is_destroyed(self, conversation_id: str) -> bool:
        with self._pool.connection() as conn:
            row = conn.execute(
                self._sql.SQL("SELECT destroyed_at FROM {} WHERE conversation_id = %s").format(self._table), (conversation_id,)
            ).fetchone()
        return row is not None and row[0] is not None

    def created_at(self, conversation_id: str) -> datetime | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                self._sql.SQL("SELECT created_at FROM {} WHERE conversation_id = %s").format(self._table), (conversation_id,)
            ).fetchone()
        return row[0] if row else None

    def vacuum(self) -> None:
        """Reclaim the dead row versions that still hold destroyed key bytes (run after deletions)."""
        import psycopg

        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(self._sql.SQL("VACUUM {}").format(self._table))

    def close(self) -> None:
        self._pool.close()


class SqliteKeyring:
    """sqlite3 keyring in its own file, with ``secure_delete`` so destroyed keys are zeroed on disk."""

    def __init__(self, path: str | Path, table: str = TABLE) -> None:
        self._path = str(path)
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._table = '"' + table.replace('"', '""') + '"'
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None, timeout=10)
        self._conn.execute("PRAGMA secure_delete = ON")
        self._conn.execute("PRAGMA journal_mode = DELETE")
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            " conversation_id TEXT PRIMARY KEY,"
            " data_key BLOB NULL,"
            " created_at TEXT NOT NULL,"
            " destroyed_at TEXT NULL,"
            " CHECK (destroyed_at IS NULL OR data_key IS NULL))"
        )

    def _now(self) -> str:
        return datetime.now(UTC).isoformat()

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        with self._lock:
            cur = self._conn.cursor()
            try:
                select = f"SELECT data_key, destroyed_at FROM {self._table} WHERE conversation_id = ?"
                row: Any = cur.execute(select, (conversation_id,)).fetchone()
                if row is None and create:  # the write lock is taken only to create the key
                    cur.execute("BEGIN IMMEDIATE")
                    cur.execute(
                        f"INSERT INTO {self._table} (conversation_id, data_key, created_at) VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO NOTHING",
                        (conversation_id, new_data_key(), self._now()),
                    )
                    row = cur.execute(select, (conversation_id,)).fetchone()
                    cur.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    cur.execute("ROLLBACK")
                raise
        return _usable_key(conversation_id, row, create)

    def destroy(self, conversation_id: str) -> None:
        now = self._now()
        with self._lock:
            self._conn.execute(
                f"INSERT INTO {self._table} (conversation_id, data_key, created_at, destroyed_at) VALUES (?, NULL, ?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET data_key = NULL, destroyed_at = COALESCE(destroyed_at, excluded.destroyed_at)",
                (conversation_id, now, now),
            )

    def is_destroyed(self, conversation_id: str) -> bool:
        with self._lock:
            row = self._conn.execute(f"SELECT destroyed_at FROM {self._table} WHERE conversation_id = ?", (conversation_id,)).fetchone()
        return row is not None and row[0] is not None

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _usable_key(conversation_id: str, row: Any, create: bool) -> bytes | None:
    """A stored ``(data_key, destroyed_at)`` row read the same way by every backend:
    a destroyed key is ``None`` for reading and :class:`KeyDestroyed` for sealing."""
    if row is None:
        return None
    key, destroyed_at = row
    if destroyed_at is not None or key is None:
        if create:
            raise KeyDestroyed(conversation_id)
        return None
    return bytes(key)


def open_keyring(settings: Settings) -> PostgresKeyring | SqliteKeyring:
    """The keyring of this deployment, chosen like the event stores."""
    if settings.uses_postgres:
        assert settings.database_url is not None
        return PostgresKeyring(settings.database_url, schema=settings.database_schema)
    return SqliteKeyring(Path(settings.state_dir) / "data" / "keyring.sqlite")

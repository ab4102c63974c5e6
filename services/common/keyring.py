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
* SQLite runs with ``PRAGMA secure_delete=ON``, so freed cells are zeroed when the
  NULL is written, and the write-ahead log is checkpointed and truncated right after.

The backend follows :class:`services.common.settings.Settings` exactly like
``services.common.eventstore``: PostgreSQL when ``database_url`` is a
``postgresql://`` URL (in ``database_schema`` when set), otherwise an SQLite file
``<state_dir>/data/keyring.sqlite``. Both stand on eventsourcing's datastores
(``PostgresDatastore``, ``SQLiteDatastore``: their pools, transactions and error
mapping), as Delivery's view store does. :class:`InMemoryKeyring` is for unit tests.

No cache: every read asks the table, so a key destroyed by one process is
unusable by every other process from the moment the UPDATE commits.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from eventsourcing.persistence import IntegrityError, InternalError, ProgrammingError
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from imprint.shredding import KeyDestroyed, Keyring, new_data_key
from services.common.eventstore import reading
from services.common.settings import Settings

__all__ = ["InMemoryKeyring", "KeyDestroyed", "Keyring", "PostgresKeyring", "SqliteKeyring", "open_keyring"]

TABLE = "imprint_conversation_keys"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


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

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        with self._lock:
            return {c: self._keys.get(c) for c in set(conversation_ids)}

    def close(self) -> None:
        pass


def postgres_datastore(url: str, schema: str | None = None, pool_size: int = 4) -> PostgresDatastore:
    """An eventsourcing PostgreSQL datastore (its pool, autocommit connections, error
    mapping) for a ``postgresql://`` URL, the way ``store_environment`` reads one."""
    parsed = urlparse(url)
    return PostgresDatastore(
        dbname=parsed.path.lstrip("/") or "imprint", host=parsed.hostname or "127.0.0.1", port=parsed.port or 5432,
        user=unquote(parsed.username or "imprint"), password=unquote(parsed.password or ""),
        pool_size=pool_size, max_overflow=pool_size, schema=schema or "",
    )


def create_table_racing(datastore: PostgresDatastore | SQLiteDatastore, statement: str, attempts: int = 5) -> None:
    """``CREATE TABLE IF NOT EXISTS`` that tolerates another process creating the same table at the
    same moment (PostgreSQL then reports a duplicate row type or relation)."""
    for attempt in range(attempts):
        try:
            with datastore.transaction(commit=True) as cursor:
                cursor.execute(statement)
            return
        except (IntegrityError, ProgrammingError, InternalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


class _KeyTable:
    """The key table on an eventsourcing datastore; ``{t}`` is the table, ``?`` the placeholder."""

    datastore: PostgresDatastore | SQLiteDatastore
    table: str
    placeholder = "?"

    def q(self, statement: str) -> str:
        statement = statement.replace("{t}", self.table)
        return statement.replace("?", self.placeholder) if self.placeholder != "?" else statement

    def _prepare(self, cursor: Any) -> None:
        """Per-transaction settings (SQLite: zero freed cells)."""

    def _now(self) -> Any:
        return datetime.now(UTC).isoformat()

    def _select(self, conversation_id: str) -> Any:
        with reading(self.datastore) as cursor:
            cursor.execute(self.q("SELECT data_key, destroyed_at FROM {t} WHERE conversation_id = ?"), (conversation_id,))
            return _row(cursor.fetchone())

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        row = self._select(conversation_id)
        if row is None and create:  # the write happens once per conversation, not per lookup
            with self.datastore.transaction(commit=True) as cursor:
                self._prepare(cursor)
                cursor.execute(
                    self.q("INSERT INTO {t} (conversation_id, data_key, created_at) VALUES (?, ?, ?)"
                           " ON CONFLICT (conversation_id) DO NOTHING"),
                    (conversation_id, new_data_key(), self._now()),
                )
            self._after_write()
            row = self._select(conversation_id)
        return _usable_key(conversation_id, row, create)

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        """Many keys in one read (the relay opens a batch's bodies with it); destroyed or
        missing keys are ``None``."""
        wanted = sorted(set(conversation_ids))
        found: dict[str, bytes | None] = dict.fromkeys(wanted)
        with reading(self.datastore) as cursor:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ", ".join("?" * len(chunk))
                cursor.execute(self.q(f"SELECT conversation_id, data_key, destroyed_at FROM {{t}} "
                                      f"WHERE conversation_id IN ({marks})"), chunk)
                for row in cursor.fetchall():
                    found[row["conversation_id"]] = _usable_key(row["conversation_id"],
                                                                (row["data_key"], row["destroyed_at"]), False)
        return found

    def destroy(self, conversation_id: str) -> None:
        now = self._now()
        with self.datastore.transaction(commit=True) as cursor:
            self._prepare(cursor)
            cursor.execute(
                self.q("INSERT INTO {t} AS k (conversation_id, data_key, created_at, destroyed_at) VALUES (?, NULL, ?, ?)"
                       " ON CONFLICT (conversation_id) DO UPDATE"
                       " SET data_key = NULL, destroyed_at = COALESCE(k.destroyed_at, excluded.destroyed_at)"),
                (conversation_id, now, now),
            )
        self._after_write()

    def _after_write(self) -> None:
        pass

    def is_destroyed(self, conversation_id: str) -> bool:
        with reading(self.datastore) as cursor:
            cursor.execute(self.q("SELECT destroyed_at FROM {t} WHERE conversation_id = ?"), (conversation_id,))
            row = cursor.fetchone()
        return row is not None and row["destroyed_at"] is not None

    def close(self) -> None:
        self.datastore.close()


class PostgresKeyring(_KeyTable):
    """The key table in PostgreSQL, on eventsourcing's :class:`PostgresDatastore`. ``schema``
    defaults to ``public``."""

    placeholder = "%s"

    def __init__(self, url: str, schema: str | None = None, table: str = TABLE, pool_size: int = 4) -> None:
        _check_identifier(table)
        self.datastore = postgres_datastore(url, schema, pool_size)
        self._url = url
        self.table = f'"{self.datastore.schema}"."{table}"'
        create_table_racing(self.datastore, self.q(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " conversation_id text PRIMARY KEY,"
            " data_key bytea NULL,"
            " created_at timestamptz NOT NULL DEFAULT now(),"
            " destroyed_at timestamptz NULL,"
            " CHECK (destroyed_at IS NULL OR data_key IS NULL))"
        ))

    def _now(self) -> Any:
        return datetime.now(UTC)

    def created_at(self, conversation_id: str) -> datetime | None:
        with reading(self.datastore) as cursor:
            cursor.execute(self.q("SELECT created_at FROM {t} WHERE conversation_id = ?"), (conversation_id,))
            row = cursor.fetchone()
        return row["created_at"] if row else None

    def vacuum(self) -> None:
        """Reclaim the dead row versions that still hold destroyed key bytes (run after deletions)."""
        with self.datastore.get_connection() as connection:  # autocommit: VACUUM runs outside a transaction
            connection.execute(self.q("VACUUM {t}"))


class SqliteKeyring(_KeyTable):
    """The key table in its own SQLite file, on eventsourcing's :class:`SQLiteDatastore`, with
    ``secure_delete`` so destroyed keys are zeroed on disk, and the write-ahead log
    checkpointed and truncated after each destruction so no old page image outlives it."""

    def __init__(self, path: str | Path, table: str = TABLE) -> None:
        _check_identifier(table)
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.datastore = SQLiteDatastore(str(path), lock_timeout=10, pool_size=2, max_overflow=4)
        self.table = f'"{table}"'
        create_table_racing(self.datastore, self.q(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " conversation_id TEXT PRIMARY KEY,"
            " data_key BLOB NULL,"
            " created_at TEXT NOT NULL,"
            " destroyed_at TEXT NULL,"
            " CHECK (destroyed_at IS NULL OR data_key IS NULL))"
        ))

    def _prepare(self, cursor: Any) -> None:
        cursor.execute("PRAGMA secure_delete = ON")

    def _after_write(self) -> None:
        """eventsourcing's SQLite datastore runs in WAL mode: fold the write into the file at
        once, so no page image with a destroyed key waits in the ``-wal`` file (a checkpoint
        blocked by a reader finishes at the next write or on close)."""
        with self.datastore.get_connection(commit=True) as connection:
            connection.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _check_identifier(name: str) -> None:
    if not _IDENT.match(name):
        raise ValueError(f"unsafe table name {name!r}")


def _row(row: Any) -> tuple[Any, Any] | None:
    return None if row is None else (row["data_key"], row["destroyed_at"])


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

"""Per-conversation data keys for crypto-shredding (SPEC X8), outside the append-only logs.

One small *mutable* table, ``imprint_conversation_keys``::

    conversation_id  text PRIMARY KEY
    data_key         bytea / BLOB  NULL after destruction
    created_at       timestamp
    destroyed_at     timestamp     NULL until destroyed

Every private field of the journal and every block body of Publication is stored only
as AES-GCM ciphertext under the conversation's key. Deleting a conversation (user
request or retention) overwrites ``data_key`` with NULL and sets ``destroyed_at``; the
row stays as a marker, so a destroyed conversation never gets a fresh key
(``key_for(..., create=True)`` raises ``KeyDestroyed``).

Physical erasure of the old key bytes differs by backend, so each has its class:

* PostgreSQL keeps the pre-update row version until VACUUM; call
  :meth:`PostgresKeyring.vacuum` after a deletion sweep. WAL segments and base backups
  may still hold the key until they rotate out — size retention of WAL archives and
  backups accordingly.
* SQLite runs with ``PRAGMA secure_delete=ON``, so freed cells are zeroed when the
  NULL is written, and the write-ahead log is checkpointed and truncated right after.

The deployment's backend (:mod:`services.common.backends`) builds the one it uses, on
its :class:`~services.common.tables.Tables`. The memory backend keeps keys in
:class:`imprint.shredding.InMemoryKeyring`.

No cache: every read asks the table, so a key destroyed by one process is
unusable by every other process from the moment the UPDATE commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from imprint.shredding import KeyDestroyed, new_data_key
from services.common.tables import Tables

TABLE = "imprint_conversation_keys"


class KeyTable:
    """The key table on a :class:`Tables`."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.names = {"t": tables.table(TABLE)}
        tables.create([self.q(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " conversation_id TEXT PRIMARY KEY,"
            f" data_key {tables.binary_type} NULL,"
            f" created_at {tables.timestamp_type} NOT NULL,"
            f" destroyed_at {tables.timestamp_type} NULL,"
            " CHECK (destroyed_at IS NULL OR data_key IS NULL))")])

    def q(self, statement: str) -> str:
        return self.tables.q(statement, self.names)

    def _before_erasing(self, cursor: Any) -> None:
        """Per write transaction (SQLite: zero freed cells)."""

    def _after_erasing(self) -> None:
        """After a write commits (SQLite: fold it into the file)."""

    def _select(self, conversation_id: str) -> Any:
        with self.tables.reading() as cursor:
            cursor.execute(self.q("SELECT data_key, destroyed_at FROM {t} WHERE conversation_id = ?"), (conversation_id,))
            return _row(cursor.fetchone())

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        row = self._select(conversation_id)
        if row is None and create:  # the write happens once per conversation, not per lookup
            with self.tables.transaction(commit=True) as cursor:
                self._before_erasing(cursor)
                cursor.execute(
                    self.q("INSERT INTO {t} (conversation_id, data_key, created_at) VALUES (?, ?, ?)"
                           " ON CONFLICT (conversation_id) DO NOTHING"),
                    (conversation_id, new_data_key(), _now()),
                )
            self._after_erasing()
            row = self._select(conversation_id)
        return _usable_key(conversation_id, row, create)

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        """Many keys in one read (the relay opens a batch's bodies with it); destroyed or
        missing keys are ``None``."""
        wanted = sorted(set(conversation_ids))
        found: dict[str, bytes | None] = dict.fromkeys(wanted)
        with self.tables.reading() as cursor:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ", ".join("?" * len(chunk))
                cursor.execute(self.q(f"SELECT conversation_id, data_key, destroyed_at FROM {{t}} "
                                      f"WHERE conversation_id IN ({marks})"), chunk)
                for row in cursor.fetchall():
                    found[row["conversation_id"]] = _usable_key(row["conversation_id"],
                                                                (row["data_key"], row["destroyed_at"]), False)
        return found

    def create_keys(self, conversation_ids: Iterable[str]) -> None:
        """A key for each conversation that has none, in one transaction (a destroyed
        conversation keeps its marker: it never gets a fresh key)."""
        wanted = sorted(set(conversation_ids))
        if not wanted:
            return
        now = _now()
        with self.tables.transaction(commit=True) as cursor:
            self._before_erasing(cursor)
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                cursor.execute(self.q("INSERT INTO {t} (conversation_id, data_key, created_at) VALUES "
                                      + ", ".join(["(?, ?, ?)"] * len(chunk))
                                      + " ON CONFLICT (conversation_id) DO NOTHING"),
                               [value for c in chunk for value in (c, new_data_key(), now)])
        self._after_erasing()

    def destroyed_among(self, conversation_ids: Iterable[str]) -> set[str]:
        wanted = sorted(set(conversation_ids))
        found: set[str] = set()
        with self.tables.reading() as cursor:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                cursor.execute(self.q(f"SELECT conversation_id FROM {{t}} WHERE destroyed_at IS NOT NULL AND "
                                      f"conversation_id IN ({', '.join('?' * len(chunk))})"), chunk)
                found.update(row["conversation_id"] for row in cursor.fetchall())
        return found

    def destroy(self, conversation_id: str) -> None:
        now = _now()
        with self.tables.transaction(commit=True) as cursor:
            self._before_erasing(cursor)
            cursor.execute(
                self.q("INSERT INTO {t} AS k (conversation_id, data_key, created_at, destroyed_at) VALUES (?, NULL, ?, ?)"
                       " ON CONFLICT (conversation_id) DO UPDATE"
                       " SET data_key = NULL, destroyed_at = COALESCE(k.destroyed_at, excluded.destroyed_at)"),
                (conversation_id, now, now),
            )
        self._after_erasing()

    def is_destroyed(self, conversation_id: str) -> bool:
        with self.tables.reading() as cursor:
            cursor.execute(self.q("SELECT destroyed_at FROM {t} WHERE conversation_id = ?"), (conversation_id,))
            row = cursor.fetchone()
        return row is not None and row["destroyed_at"] is not None

    def close(self) -> None:
        self.tables.close()


class PostgresKeyring(KeyTable):
    """The key table in the deployment's PostgreSQL schema."""

    def vacuum(self) -> None:
        """Reclaim the dead row versions that still hold destroyed key bytes (run after deletions)."""
        with self.tables.datastore.get_connection() as connection:  # autocommit: VACUUM runs outside a transaction
            connection.execute(self.q("VACUUM {t}"))


class SqliteKeyring(KeyTable):
    """The key table in its own SQLite file, with ``secure_delete`` so destroyed keys are
    zeroed on disk, and the write-ahead log checkpointed and truncated after each write so
    no old page image outlives it."""

    def _before_erasing(self, cursor: Any) -> None:
        cursor.execute("PRAGMA secure_delete = ON")

    def _after_erasing(self) -> None:
        """eventsourcing's SQLite datastore runs in WAL mode: fold the write into the file at
        once, so no page image with a destroyed key waits in the ``-wal`` file (a checkpoint
        blocked by a reader finishes at the next write or on close)."""
        with self.tables.datastore.get_connection(commit=True) as connection:
            connection.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _now() -> str:
    # ISO 8601 text: a TEXT column keeps it as is, a timestamptz column parses it.
    return datetime.now(UTC).isoformat()


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

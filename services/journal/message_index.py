"""The mutable message → execution lookup index (SPEC X4), as a small SQL table.

``<name>_message_index (conversation_id, message_id) → run_id``. It is a pointer
for convenience, written after the admission commits; reads go through
``imprint.journal.history.resolve_execution``, which verifies the execution's
immutable binding. Losing or clearing a row makes that message "not found" —
never a fallback. ``RuntimeJournal.rebuild_message_index`` re-derives the rows
from the conversation aggregates (e.g. after a crash between the commit and the
index write). Identifiers only; no private text.

One class on eventsourcing's datastores (``PostgresDatastore`` in the deployment's
schema, or ``SQLiteDatastore`` in its own file), as the key store and Delivery's view
store are: their pools, transactions and error mapping, not ours.
"""

from __future__ import annotations

import re
from pathlib import Path

from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore

from services.common.eventstore import reading
from services.common.keyring import create_table_racing, postgres_datastore
from services.common.settings import Settings

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class StoreMessageIndex:
    def __init__(self, datastore: PostgresDatastore | SQLiteDatastore, table: str) -> None:
        if not _IDENT.match(table):
            raise ValueError(f"unsafe table name {table!r}")
        self.datastore = datastore
        postgres = isinstance(datastore, PostgresDatastore)
        self._placeholder = "%s" if postgres else "?"
        self._table = f'"{datastore.schema}"."{table}"' if postgres else f'"{table}"'
        updated = " updated_at timestamptz NOT NULL DEFAULT now()," if postgres else ""
        create_table_racing(datastore, self._q(
            "CREATE TABLE IF NOT EXISTS {t} ("
            f" conversation_id text NOT NULL, message_id text NOT NULL, run_id text NOT NULL,{updated}"
            " PRIMARY KEY (conversation_id, message_id))"
        ))
        self._touch = ", updated_at = now()" if postgres else ""

    def _q(self, statement: str) -> str:
        return statement.replace("{t}", self._table).replace("?", self._placeholder)

    def lookup(self, conversation_id: str, message_id: str) -> str | None:
        with reading(self.datastore) as cursor:
            cursor.execute(self._q("SELECT run_id FROM {t} WHERE conversation_id = ? AND message_id = ?"),
                           (conversation_id, message_id))
            row = cursor.fetchone()
        return row["run_id"] if row else None

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._q(
                "INSERT INTO {t} (conversation_id, message_id, run_id) VALUES (?, ?, ?)"
                " ON CONFLICT (conversation_id, message_id) DO UPDATE SET run_id = excluded.run_id" + self._touch
            ), (conversation_id, message_id, run_id))

    def clear(self, conversation_id: str, message_id: str) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._q("DELETE FROM {t} WHERE conversation_id = ? AND message_id = ?"),
                           (conversation_id, message_id))

    def drop_conversation(self, conversation_id: str) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            cursor.execute(self._q("DELETE FROM {t} WHERE conversation_id = ?"), (conversation_id,))

    def close(self) -> None:
        self.datastore.close()


def open_message_index(settings: Settings, application: str = "journal") -> StoreMessageIndex:
    table = f"{application.lower()}_message_index"
    if settings.uses_postgres:
        assert settings.database_url is not None
        return StoreMessageIndex(postgres_datastore(settings.database_url, settings.database_schema), table)
    path = Path(settings.state_dir) / "data" / f"{application.lower()}_index.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return StoreMessageIndex(SQLiteDatastore(str(path), lock_timeout=10, pool_size=2, max_overflow=4), table)

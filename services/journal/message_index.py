"""The mutable message → execution lookup index (SPEC X4), as a small SQL table.

``<name>_message_index (conversation_id, message_id) → run_id``. It is a pointer
for convenience, written after the admission commits; reads go through
``imprint.journal.history.resolve_execution``, which verifies the execution's
immutable binding. Losing or clearing a row makes that message "not found" —
never a fallback. ``RuntimeJournal.rebuild_message_index`` re-derives the rows
from the conversation aggregates (e.g. after a crash between the commit and the
index write). Identifiers only; no private text.

One class on the :class:`~services.common.tables.Tables` the deployment's backend
gives it (the database's schema, or a SQLite file of its own).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.tables import Tables, checked_identifier


class StoreMessageIndex:
    def __init__(self, tables: Tables, table: str) -> None:
        self.tables = tables
        self.names = {"t": tables.table(checked_identifier(table))}
        tables.create([self._q(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " conversation_id text NOT NULL, message_id text NOT NULL, run_id text NOT NULL,"
            " PRIMARY KEY (conversation_id, message_id))"
        )])

    def _q(self, statement: str) -> str:
        return self.tables.q(statement, self.names)

    def lookup(self, conversation_id: str, message_id: str) -> str | None:
        with self.tables.reading() as cursor:
            cursor.execute(self._q("SELECT run_id FROM {t} WHERE conversation_id = ? AND message_id = ?"),
                           (conversation_id, message_id))
            row = cursor.fetchone()
        return row["run_id"] if row else None

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None:
        with self.tables.transaction(commit=True) as cursor:
            cursor.execute(self._q(
                "INSERT INTO {t} (conversation_id, message_id, run_id) VALUES (?, ?, ?)"
                " ON CONFLICT (conversation_id, message_id) DO UPDATE SET run_id = excluded.run_id"
            ), (conversation_id, message_id, run_id))

    def point_many(self, pointers: Sequence[tuple[str, str, str]]) -> None:
        """Many (conversation, message, run) pointers in one transaction."""
        if not pointers:
            return
        with self.tables.transaction(commit=True) as cursor:
            for start in range(0, len(pointers), 500):
                chunk = pointers[start:start + 500]
                cursor.execute(self._q(
                    "INSERT INTO {t} (conversation_id, message_id, run_id) VALUES " + ", ".join(["(?, ?, ?)"] * len(chunk))
                    + " ON CONFLICT (conversation_id, message_id) DO UPDATE SET run_id = excluded.run_id"
                ), [value for pointer in chunk for value in pointer])

    def clear(self, conversation_id: str, message_id: str) -> None:
        with self.tables.transaction(commit=True) as cursor:
            cursor.execute(self._q("DELETE FROM {t} WHERE conversation_id = ? AND message_id = ?"),
                           (conversation_id, message_id))

    def drop_conversation(self, conversation_id: str) -> None:
        with self.tables.transaction(commit=True) as cursor:
            cursor.execute(self._q("DELETE FROM {t} WHERE conversation_id = ?"), (conversation_id,))

    def close(self) -> None:
        self.tables.close()

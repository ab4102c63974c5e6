"""eventsourcing process recorders that commit one poll of several partitions in ONE
transaction: the events, plus the tracking record of each partition's last message.

eventsourcing's process recorders take one ``tracking`` per transaction; a consumer
whose poll spans several partitions would otherwise pay one transaction (one lock of
the events table, one fsync) per partition. These subclasses also accept
``trackings=[…]`` (through ``ProcessingEvent.saved_kwargs``) and insert each, in the
same transaction, with the library's own statement — so a redelivered position still
fails the whole transaction with ``IntegrityError``, as a single tracking would. On
PostgreSQL the events go to the server in binary (see :func:`_binary_events`).

Selected by configuration (``PROCESS_RECORDER_TOPIC``, see :func:`tracking_many`),
never by ``if sqlite … else postgres`` in the callers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresProcessRecorder
from eventsourcing.sqlite import SQLiteProcessRecorder
from psycopg.sql import SQL, Composed


def _binary_events(statement: Composed | SQL) -> SQL:
    """The library's insert statement with its array of stored events passed in binary
    (``%b``): psycopg then writes each event's state as raw bytes instead of escaping it
    as text in Python, a third of the CPU for events of ~1.5 KB (10 per call: 1.65 →
    0.55 ms)."""
    text = statement.as_string(None)
    if "unnest(%s::" not in text:
        raise RuntimeError("eventsourcing's insert statement changed: unnest(%s::…) not found")
    return SQL(text.replace("unnest(%s::", "unnest(%b::"))  # type: ignore[arg-type]


class PostgresPollRecorder(PostgresProcessRecorder):
    records_many_trackings = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.insert_events_statement = _binary_events(self.insert_events_statement)

    def _insert_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        for tracking in kwargs.pop("trackings", ()):
            self._insert_tracking(curs, tracking=tracking)
        return super()._insert_events(curs, stored_events, **kwargs)


class SQLitePollRecorder(SQLiteProcessRecorder):
    records_many_trackings = True

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        trackings = kwargs.pop("trackings", ())
        returning = super()._insert_events(c, stored_events, **kwargs)
        for tracking in trackings:
            self._insert_tracking(c, tracking)
        return returning


_RECORDERS = {
    "eventsourcing.postgres": f"{__name__}:PostgresPollRecorder",
    "eventsourcing.sqlite": f"{__name__}:SQLitePollRecorder",
}


def tracking_many(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` with the poll recorder of its persistence module (unchanged for others, e.g. in-memory)."""
    env = dict(env or {})
    topic = _RECORDERS.get(env.get("PERSISTENCE_MODULE", ""))
    if topic is not None:
        env.setdefault("PROCESS_RECORDER_TOPIC", topic)
    return env

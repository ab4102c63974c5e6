"""eventsourcing recorders that commit one poll of several partitions in ONE
transaction: the events, plus the tracking record of each partition's last message.

eventsourcing's process recorders take one ``tracking`` per transaction; a consumer
whose poll spans several partitions would otherwise pay one transaction (one lock of
the events table, one fsync) per partition. These subclasses also accept
``trackings=[…]`` (through ``ProcessingEvent.saved_kwargs``) and insert each, in the
same transaction, with the library's own statement — so a redelivered position still
fails the whole transaction with ``IntegrityError``, as a single tracking would (the
library's hooks inside its insert transaction: :mod:`services.common.eventsourcing_adapter`).
On PostgreSQL the events go to the server in binary (see :func:`_binary_events`).

They also read the streams of many aggregates in one query (:meth:`select_events_of`,
what a whole-log replay reads a page of runs with, instead of one query per run), say
which of many aggregates are stored (:meth:`stored_ids`) and keep an index of one
topic's notifications where an application reads that topic alone
(:meth:`index_topic`). Every backend's poll recorder has all of them
(:class:`PollRecorder`), so no caller asks which one it holds.

The ``*Positions`` recorders are the same tracking machinery for a store that is not an
event log (Delivery's view tables): many partitions' positions read and recorded in one
statement each.

Each backend of :mod:`services.common.backends` names its recorders in the eventsourcing
environment it builds (``PROCESS_RECORDER_TOPIC``, ``TRACKING_RECORDER_TOPIC``), never an
``if sqlite … else postgres`` in the callers."""

from __future__ import annotations

import hashlib
import threading
from abc import abstractmethod
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Protocol
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError, ProcessRecorder, ProgrammingError, StoredEvent, Tracking
from eventsourcing.popo import POPOFactory, POPOProcessRecorder
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteTrackingRecorder
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier, Literal

from services.common.eventsourcing_adapter import (PostgresTrackedInserts, SQLiteTrackedInserts, insert_tracking,
                                                   max_tracking_id)


def _binary_events(statement: Composed | SQL) -> SQL:
    """The library's insert statement with its array of stored events passed in binary
    (``%b``): psycopg then writes each event's state as raw bytes instead of escaping it
    as text in Python, a cost that grows with every byte of every event."""
    text = statement.as_string(None)
    if "unnest(%s::" not in text:
        raise RuntimeError("eventsourcing's insert statement changed: unnest(%s::…) not found")
    return SQL(text.replace("unnest(%s::", "unnest(%b::"))  # type: ignore[arg-type]


def _rendered(statement: Composed | SQL) -> SQL:
    """A composed statement as plain SQL text, once: executing a ``Composed`` renders it
    again on every call, quoting each identifier through libpq."""
    return SQL(statement.as_string(None))  # type: ignore[arg-type]


def binary_inserts(recorder: object) -> None:
    """A PostgreSQL aggregate recorder that inserts its stored events in binary (see
    :func:`_binary_events`); any other recorder is left as it is. The snapshot store's
    recorder is the library's own, built by the application: a run's snapshot (tens to
    hundreds of KB) would otherwise be escaped as text inside the poll that takes it."""
    if isinstance(recorder, PostgresAggregateRecorder):
        recorder.insert_events_statement = _binary_events(recorder.insert_events_statement)


COMMITTER = uuid4().hex
"""This process's mark on the NOTIFY of every commit it makes (its payload): a relay in the
same process, handed those commits in memory, knows which wake-ups it need not read the log
for (:class:`services.common.relay.Handoff`)."""

_VERSION = itemgetter(1)


def _stored_event(originator_id: UUID, originator_version: int, topic: str, state: bytes) -> StoredEvent:
    """A ``StoredEvent`` of these fields, its state set in one step as the library sets a
    decoded domain event's: its frozen dataclass ``__init__`` sets each field through
    ``object.__setattr__``, most of the cost of a row of a page of streams."""
    stored = object.__new__(StoredEvent)
    object.__setattr__(stored, "__dict__", {"originator_id": originator_id, "originator_version": originator_version,
                                            "topic": topic, "state": state})
    return stored


class PollRecorder(ProcessRecorder):
    """What every backend's process recorder does beside the library's own methods."""

    @abstractmethod
    def index_topic(self, name: str, topic: str) -> None:
        """Keep an index of ``topic``'s notifications (created if missing)."""

    @abstractmethod
    def select_events_of(self, originator_ids: Sequence[UUID]) -> list[StoredEvent]:
        """Every stored event of these aggregates: each one's events together, in version order."""

    @abstractmethod
    def stored_ids(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        """Which of these aggregates have stored events."""


class Positions(Protocol):
    """Several partitions' tracking positions, read and recorded inside a caller's transaction."""

    def positions(self, curs: Any, names: Sequence[str]) -> dict[str, int | None]:
        """Each partition's recorded position (``None``: nothing recorded yet)."""
        ...

    def record_positions(self, curs: Any, trackings: Sequence[Tracking]) -> None:
        """Move these partitions' positions forward; one that does not move forward fails
        the transaction with ``IntegrityError``."""
        ...


class PostgresTrackings:
    """A PostgreSQL tracking recorder's positions of several partitions, each in ONE
    statement: read (:meth:`positions`) and recorded (:meth:`record_positions`).
    In a pipelined transaction (psycopg's pipeline mode) each costs one round trip to the
    server, where the library's per-partition statements cost one per partition. Mixed
    into a tracking recorder of the library; one whose tracking table keeps a row per
    position (not the library's single-row default) gets the library's own statements,
    one partition at a time."""

    datastore: Any
    tracking_table_name: str

    def _prepare_trackings(self) -> None:
        table = (Identifier(self.datastore.schema), Identifier(self.tracking_table_name))
        self._insert_trackings_statement = _rendered(SQL(
            "INSERT INTO {0}.{1} AS t (application_name, notification_id) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[]) "
            "ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id "
            "WHERE t.notification_id < EXCLUDED.notification_id "
            "RETURNING t.application_name").format(*table))
        self._max_tracking_ids_statement = _rendered(SQL(
            "SELECT application_name, max(notification_id) AS max FROM {0}.{1} "
            "WHERE application_name = ANY(%s) GROUP BY application_name").format(*table))

    def positions(self, curs: Any, names: Sequence[str]) -> dict[str, int | None]:
        """Each partition's recorded position (``None``: nothing recorded yet)."""
        if not self.datastore.single_row_tracking:
            return {name: max_tracking_id(self, curs, name) for name in names}
        curs.execute(self._max_tracking_ids_statement, (list(names),), prepare=True)
        found = {row["application_name"]: row["max"] for row in curs.fetchall()}
        return {name: found.get(name) for name in names}

    def record_positions(self, curs: Any, trackings: Sequence[Tracking]) -> None:
        """The tracking records in ONE statement — the library's upsert over arrays,
        with its guard: a position moves forward only, and one that does not (already
        recorded, here or by another consumer) fails the whole transaction with
        ``IntegrityError``, before anything after it is written. In pipeline mode each of
        the library's one-row upserts waits for its row: one round trip to the server per
        partition, where this is one."""
        if not trackings:
            return
        if not self.datastore.single_row_tracking:
            for tracking in trackings:
                insert_tracking(self, curs, tracking)
            return
        names = [tracking.application_name for tracking in trackings]
        if len(set(names)) != len(names):
            raise ProgrammingError(f"one tracking record per partition, got {names}")
        curs.execute(self._insert_trackings_statement,
                     (names, [tracking.notification_id for tracking in trackings]), prepare=True)
        recorded = {row["application_name"] for row in curs.fetchall()}
        missing = [tracking for tracking in trackings if tracking.application_name not in recorded]
        if missing:
            raise IntegrityError("Failed to record tracking for " + ", ".join(
                f"{tracking.application_name} {tracking.notification_id}" for tracking in missing))


class PostgresPositions(PostgresTrackings, PostgresTrackingRecorder):
    """A tracking recorder of many partitions' positions, for a store that is not an event log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prepare_trackings()


class PostgresPollRecorder(PostgresTrackings, PostgresTrackedInserts, PollRecorder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.datastore.enable_db_functions:
            # The library then inserts through its database function, which takes the
            # events alone: a poll's tracking records would silently not be written, and
            # every message would be applied again after a restart.
            raise ProgrammingError("POSTGRES_ENABLE_DB_FUNCTIONS is not supported by imprint's poll recorder: "
                                   "its inserts would not record the polls' tracking records")
        binary_inserts(self)
        # The log's channel names its schema: the library's (the table's name) is one channel for
        # every deployment in a database, and each relay read its log for every other's commits.
        digest = hashlib.sha256(f"{self.datastore.schema}.{self.events_table_name}".encode()).hexdigest()[:20]
        self.channel_name = f"imprint_{self.events_table_name}_{digest}"[:63]
        # The statements every recorded poll runs, rendered once.
        self.lock_table_statements = [_rendered(statement) for statement in self.lock_table_statements]
        self.insert_tracking_statement = _rendered(self.insert_tracking_statement)
        self.max_tracking_id_statement = _rendered(self.max_tracking_id_statement)
        self.notify_statement = _rendered(SQL("NOTIFY {0}, {1}").format(Identifier(self.channel_name),
                                                                         Literal(COMMITTER)))
        self._prepare_trackings()

    def index_topic(self, name: str, topic: str) -> None:
        """A partial index of the notification ids of ``topic``'s events alone, so reading
        the notification log filtered to that topic (``select_notifications(topics=…)``)
        walks those events, not every event after ``start`` (without it, a page of a
        whole-log replay's run index scans every event between two run openings). Created
        if missing, under the caller's creation lock; the cost on a write is one predicate
        test per event."""
        table = self.events_table_name
        statement = SQL("CREATE INDEX IF NOT EXISTS {0} ON {1} (notification_id) WHERE topic = {2}").format(
            Identifier(f"{table}_{name}_idx"), Identifier(self.datastore.schema, table), Literal(topic))
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(statement, prepare=False)

    def select_events_of(self, originator_ids: Sequence[UUID]) -> list[StoredEvent]:
        """Every stored event of these aggregates, in one query: each one's events
        together, in version order.

        The rows are put in order here, not by the server: an ``ORDER BY`` over a whole
        page of runs outgrows the default ``work_mem`` and is sorted on disk. Grouped by
        aggregate, each stream is sorted by its version alone — integers, almost always
        in order already, as the heap holds them.

        A row names its aggregate by its place in ``originator_ids`` (an integer), not by
        its id: the driver then makes no UUID per row, the rows are grouped without hashing
        UUIDs in Python, and each stream's events carry the caller's own id object, which
        the reader's lookups by originator id find by identity."""
        rows = self._over_ids("SELECT array_position(%(ids)s, originator_id), originator_version, topic, state"
                              " FROM {table} WHERE originator_id = ANY(%(ids)s)", originator_ids)
        streams: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows:
            streams.setdefault(row[0], []).append(row)
        events: list[StoredEvent] = []
        for place, stream in streams.items():
            stream.sort(key=_VERSION)
            originator_id = originator_ids[place - 1]
            events.extend(_stored_event(originator_id, version, topic, bytes(state))
                          for _, version, topic, state in stream)
        return events

    def stored_ids(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        """Which of these aggregates have stored events, in one query."""
        rows = self._over_ids("SELECT ids.originator_id FROM unnest(%(ids)s::uuid[]) AS ids(originator_id) WHERE EXISTS"
                              " (SELECT 1 FROM {table} e WHERE e.originator_id = ids.originator_id)", originator_ids)
        return {originator_id for (originator_id,) in rows}

    def _over_ids(self, statement: str, originator_ids: Sequence[UUID]) -> list[tuple[Any, ...]]:
        """The rows (tuples) of ``statement`` over the events table (``{table}``) with the
        ids as one array parameter (``%(ids)s``), in binary: a stored state then travels as its bytes, not
        as hex text the server writes and the client parses."""
        query = SQL(statement).format(table=Identifier(self.datastore.schema, self.events_table_name))  # type: ignore[arg-type]
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row, binary=True) as curs:
            curs.execute(query, {"ids": list(originator_ids)}, prepare=True)
            return curs.fetchall()


class SQLiteTrackings:
    """The SQLite tracking recorder's positions of several partitions (one statement each:
    the file has one writer at a time, so there is no round trip to save)."""

    def positions(self, curs: Any, names: Sequence[str]) -> dict[str, int | None]:
        return {name: max_tracking_id(self, curs, name) for name in names}

    def record_positions(self, curs: Any, trackings: Sequence[Tracking]) -> None:
        for tracking in trackings:
            insert_tracking(self, curs, tracking)


class SQLitePositions(SQLiteTrackings, SQLiteTrackingRecorder):
    """A tracking recorder of many partitions' positions, for a store that is not an event log."""


class SQLitePollRecorder(SQLiteTrackings, SQLiteTrackedInserts, PollRecorder):
    def index_topic(self, name: str, topic: str) -> None:
        """A partial index of ``topic``'s events (by topic, then rowid: the notification
        log's order), for a read of that topic alone (see the PostgreSQL recorder)."""
        table = self.events_table_name
        literal = "'" + topic.replace("'", "''") + "'"  # an index's predicate takes no parameters
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"CREATE INDEX IF NOT EXISTS {table}_{name}_idx ON {table} (topic) WHERE topic = {literal}")

    def select_events_of(self, originator_ids: Sequence[UUID]) -> list[StoredEvent]:
        """Every stored event of these aggregates: each one's events together, in version order."""
        rows = self._over_ids("SELECT * FROM {table} WHERE originator_id IN ({ids}) "
                              "ORDER BY originator_id, originator_version", originator_ids)
        return [StoredEvent(originator_id=self.convert_originator_id(row["originator_id"]),
                            originator_version=row["originator_version"], topic=row["topic"], state=row["state"])
                for row in rows]

    def stored_ids(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        """Which of these aggregates have stored events."""
        rows = self._over_ids("SELECT DISTINCT originator_id FROM {table} WHERE originator_id IN ({ids})",
                              originator_ids)
        return {self.convert_originator_id(row["originator_id"]) for row in rows}

    def _over_ids(self, statement: str, originator_ids: Sequence[UUID]) -> list[Any]:
        """The rows of ``statement`` over the events table (``{table}``), 500 ids at a time
        (``{ids}``: their placeholders), in one read transaction."""
        rows: list[Any] = []
        ids = [i.hex if isinstance(i, UUID) else i for i in originator_ids]
        with self.datastore.transaction(commit=False) as c:
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                c.execute(statement.format(table=self.events_table_name, ids=", ".join("?" * len(chunk))), chunk)
                rows.extend(c.fetchall())
        return rows


class MemoryPollRecorder(POPOProcessRecorder, PollRecorder):
    """The in-memory process recorder (eventsourcing's POPO) with the poll recorder's methods."""

    def __init__(self) -> None:
        super().__init__()
        self._polls = threading.RLock()

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """The library's insert, with a poll's tracking records (``trackings=[…]``): each
        checked before anything is written (one that does not move its position forward
        raises ``IntegrityError``, as the library's own ``tracking`` does), then the events
        (the library's checks and insert), then the positions, under one lock."""
        trackings: Sequence[Tracking] = kwargs.pop("trackings", ())
        with self._polls:
            for tracking in trackings:
                recorded = self.max_tracking_id(tracking.application_name)
                if recorded is not None and recorded >= tracking.notification_id:
                    raise IntegrityError(f"Tracking notification ID {tracking.notification_id} "
                                         f"not greater than current max tracking ID {recorded}")
            notification_ids = super().insert_events(stored_events, **kwargs)
            for tracking in trackings:
                self.insert_tracking(tracking)
            return notification_ids

    def index_topic(self, name: str, topic: str) -> None:
        """Nothing to index: the notifications are a list in memory."""

    def select_events_of(self, originator_ids: Sequence[UUID]) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        for originator_id in dict.fromkeys(originator_ids):
            events.extend(self.select_events(originator_id))
        return events

    def stored_ids(self, originator_ids: Sequence[UUID]) -> set[UUID]:
        return {originator_id for originator_id in originator_ids if self.select_events(originator_id, limit=1)}


class MemoryFactory(POPOFactory):
    """eventsourcing's in-memory persistence with :class:`MemoryPollRecorder` as its process recorder."""

    def process_recorder(self) -> ProcessRecorder:
        return MemoryPollRecorder()

    def env_create_table(self) -> bool:
        return True  # nothing to create, as for the library's own in-memory recorders

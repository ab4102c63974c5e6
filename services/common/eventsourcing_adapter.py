"""The only module of ``libs/`` and ``services/`` that touches a private (underscore) member
of eventsourcing, pinned at :data:`PINNED_VERSION`.

Everything else uses the library's public extension points (``docs/architecture.md``,
"The log on eventsourcing"): the ``construct_*`` factory hooks, ``ProcessingEvent``,
``EventStore.put``, ``Repository.cache``, ``Application.snapshots`` and ``take_snapshot``,
``Mapper.to_stored_event``, ``Recorder.insert_events`` and ``insert_tracking``. What is
left are the recorders' hooks *inside* one insert transaction, which the library offers
its own subclasses only:

``ApplicationRecorder._insert_events(cursor, stored_events, **kwargs)`` (PostgreSQL, SQLite)
    The library's ``insert_events`` opens the transaction (on PostgreSQL: a pipeline,
    the table lock, the ``NOTIFY``, the insert, the notification ids read back) and calls
    this hook inside it, with the keyword arguments ``EventStore.put`` was given; its own
    process recorders write their one ``tracking`` there. A poll's tracking records (one
    per partition, ``trackings=[…]``) must commit in the same transaction as its events,
    and the public ``insert_events`` can only be replaced whole, with a copy of that
    locking and pipelining. PostgreSQL calls it before the events are inserted, SQLite
    after (it returns the notification ids there).
``PostgresApplicationRecorder._notify_channel(cursor)``
    The ``NOTIFY`` each insert sends, inside the transaction; its payload marks the
    committing process (:data:`services.common.recorders.COMMITTER`), and it is left out
    while that process's own relay leads and is handed the commit in memory
    (:attr:`PostgresTrackedInserts.handed_off`). No setting names a payload or drops it.
``TrackingRecorder._insert_tracking(cursor, tracking)`` and ``_max_tracking_id(name, cursor)``
    (PostgreSQL, SQLite): the library's statement and guard for one position, on the
    caller's cursor. The public ``insert_tracking`` and ``max_tracking_id`` open their own
    transaction, where these must run in the poll's.

``tests/component/common/test_eventsourcing_adapter.py`` pins each hook's signature and
the order the library calls them in, against this version: an upgrade that changes one
fails there instead of losing tracking records silently. ``tests/unit/test_architecture.py``
fails on a private member of the library used anywhere else."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent, Tracking
from eventsourcing.postgres import PostgresProcessRecorder
from eventsourcing.sqlite import SQLiteProcessRecorder

PINNED_VERSION = "9.5.6"
"""The eventsourcing release these hooks were read from (``constraints.txt``)."""


class PostgresTrackedInserts(PostgresProcessRecorder):
    """The library's PostgreSQL process recorder, writing a poll's tracking records
    (``trackings=[…]``) first in each insert transaction, and sending
    :attr:`notify_statement` as the transaction's ``NOTIFY`` unless :attr:`handed_off`.
    The subclass provides ``record_positions(cursor, trackings)`` and sets
    ``notify_statement``."""

    notify_statement: Any
    handed_off: Callable[[], bool] = staticmethod(lambda: False)
    """Whether this process's commits are handed, right now, to the log's one active relay
    in memory (:class:`services.common.handoff.Handoff`, set by
    :func:`services.common.relay.relay_for`): then nobody needs their ``NOTIFY`` — that
    relay has them, and a standby reads the log from the recorded position when it takes
    over — and leaving it out spares the commit the server's notification queue and this
    process's listening thread a wake-up (and a turn at the GIL) per commit."""

    def record_positions(self, curs: Any, trackings: Sequence[Tracking]) -> None:
        raise NotImplementedError

    def _insert_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        self.record_positions(curs, kwargs.pop("trackings", ()))
        return super()._insert_events(curs, stored_events, **kwargs)

    def _notify_channel(self, curs: Any) -> None:
        if not self.handed_off():
            curs.execute(self.notify_statement)


class SQLiteTrackedInserts(SQLiteProcessRecorder):
    """The library's SQLite process recorder, writing a poll's tracking records
    (``trackings=[…]``) in each insert transaction, after the events. The subclass
    provides ``record_positions(cursor, trackings)``."""

    def record_positions(self, curs: Any, trackings: Sequence[Tracking]) -> None:
        raise NotImplementedError

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        trackings = kwargs.pop("trackings", ())
        returning = super()._insert_events(c, stored_events, **kwargs)
        self.record_positions(c, trackings)
        return returning


def insert_tracking(recorder: Any, curs: Any, tracking: Tracking) -> None:
    """The library's write of one tracking record (its statement and its guard: a position
    that does not move forward raises ``IntegrityError``), on the caller's cursor."""
    recorder._insert_tracking(curs, tracking)


def max_tracking_id(recorder: Any, curs: Any, application_name: str) -> int | None:
    """The library's read of one position (``None``: nothing recorded), on the caller's cursor."""
    return recorder._max_tracking_id(application_name, curs)  # type: ignore[no-any-return]

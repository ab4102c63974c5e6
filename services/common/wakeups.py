"""Wake a reader as soon as another process writes: one ``LISTEN`` mechanism for every store.

eventsourcing's PostgreSQL application recorder sends ``NOTIFY <channel_name>`` in every
insert transaction, and Delivery's view tables ``NOTIFY`` their channel with the runs a
batch changed. A :class:`ChannelListener` thread LISTENs on a connection of the store's
own datastore (its pool, its connection settings — the way eventsourcing's
``PostgresSubscription`` listens) and hands each payload to the event loop: the relay
then reads its log from its recorded position, Delivery wakes the live feeds of those
runs. Where the backend has no such channel (SQLite, memory: one writer per store) the
relay polls and Delivery's own consumer wakes its feeds (:mod:`services.common.backends`).

Why not eventsourcing's ``Subscription`` (``recorder.subscribe(gt=…)`` /
``ApplicationSubscription``) itself: it is a blocking iterator of single
notifications whose ``__next__`` has no timeout, so its reader cannot tell "caught up"
from "more coming" — the relay needs exact batch boundaries to produce a batch, flush
once and record one position per batch (and to stop or step down between batches).
Its pull thread also fixes the read size (500) and ends the subscription on the first
database error, and the SQLite recorder does not implement ``subscribe`` at all. So
the relay keeps its own ordered ``select_notifications`` batches and takes only the
wake-up from the library's NOTIFY.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import threading
from collections.abc import Callable
from typing import Any

from psycopg import sql

from services.common.observability import get_logger

log = get_logger(__name__)


LISTEN_CHECK_SECONDS = 60.0
"""How long the listening thread sleeps on its socket before it looks again whether it
should stop, when nothing arrives and nobody stops it (a stop wakes it at once)."""


class ChannelListener:
    """``LISTEN`` on one channel of a PostgreSQL datastore, in a thread of its own.

    The thread sleeps on the connection's socket and on a pipe of its own (written by
    :meth:`stop`) until either is readable, then reads what arrived: psycopg's own wait
    for notifications wakes every tenth of a second to look for signals, ten wake-ups a
    second per listener in a stack with nothing to do."""

    def __init__(self, datastore: Any, channel: str) -> None:
        self._datastore = datastore
        self._channel = channel
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop_reader, self._stop_writer = os.pipe()

    def start(self, loop: asyncio.AbstractEventLoop, heard: Callable[[str | None], None],
              known: Callable[[str], bool] = lambda committer: False) -> None:
        """Call ``heard`` on ``loop`` with every notification's payload (a log's: the
        committer's mark, :data:`services.common.recorders.COMMITTER` of the process that
        wrote it); ``None`` when notifications may have been missed (on every (re)connect).
        A payload ``known`` already (this process's own commit, handed to its relay in
        memory, or its own batch, whose feeds it woke itself) is dropped here, in the
        listening thread, without waking the loop."""
        def listen() -> None:
            while not self._stopping.is_set():
                try:
                    with self._datastore.get_connection() as connection, selectors.DefaultSelector() as ready:
                        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                        ready.register(connection.fileno(), selectors.EVENT_READ)
                        ready.register(self._stop_reader, selectors.EVENT_READ)
                        try:
                            loop.call_soon_threadsafe(heard, None)  # anything committed while we were away
                            while not self._stopping.is_set():
                                for notify in connection.notifies(timeout=0):  # what arrived, unwaited
                                    if not known(notify.payload):
                                        loop.call_soon_threadsafe(heard, notify.payload)
                                ready.select(LISTEN_CHECK_SECONDS)
                        finally:
                            if not connection.closed:
                                connection.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(self._channel)))
                except Exception as error:  # noqa: BLE001 — PersistenceError, OSError…: reconnect, poll meanwhile
                    if self._stopping.is_set():
                        break
                    log.warning("notifications interrupted; reconnecting", channel=self._channel,
                                error=type(error).__name__)
                    self._stopping.wait(1.0)
            os.close(self._stop_reader)

        self._thread = threading.Thread(target=listen, name=f"wakeups:{self._channel}", daemon=True)
        self._thread.start()

    def wake_all(self, payload: str) -> None:
        """``NOTIFY`` the channel with ``payload`` (every listener of it hears it, this one
        too), in a transaction of its own on a connection of the datastore's pool."""
        with self._datastore.transaction(commit=True) as curs:
            curs.execute(sql.SQL("SELECT pg_notify({}, {})").format(sql.Literal(self._channel), sql.Literal(payload)))

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        os.write(self._stop_writer, b"\0")
        os.close(self._stop_writer)
        if self._thread is None:  # never started: nobody else closes the reading end
            os.close(self._stop_reader)

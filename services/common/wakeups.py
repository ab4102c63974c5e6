"""Wake a relay as soon as its log grows.

eventsourcing's PostgreSQL application recorder sends ``NOTIFY <channel_name>`` in every
insert transaction. A thread LISTENs on a connection of the recorder's own datastore
(its pool, its connection settings — the way eventsourcing's ``PostgresSubscription``
listens) and sets an asyncio event; the relay then reads from its recorded position.
Without it (SQLite) the relay polls.

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
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.application import Application
from psycopg import sql

from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)


class LogWakeups:
    def __init__(self, datastore: Any, channel: str) -> None:
        self._datastore = datastore
        self._channel = channel
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop, heard: Callable[[str | None], None],
              known: Callable[[str], bool] = lambda committer: False) -> None:
        """Call ``heard`` on ``loop`` for every commit to the log, with the committer's mark
        (the NOTIFY's payload: :data:`services.common.recorders.COMMITTER` of the process
        that wrote it); ``None`` when commits may have been missed (on every (re)connect).
        A commit ``known`` already by its committer's mark (this process's own, handed to
        its relay in memory) is dropped here, in the listening thread, without waking the
        loop: one wake-up of the event loop less per commit."""
        def listen() -> None:
            while not self._stopping.is_set():
                try:
                    with self._datastore.get_connection() as connection:
                        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                        try:
                            loop.call_soon_threadsafe(heard, None)  # anything committed while we were away
                            while not self._stopping.is_set():
                                for notify in connection.notifies(timeout=1.0, stop_after=1):
                                    if not known(notify.payload):
                                        loop.call_soon_threadsafe(heard, notify.payload)
                        finally:
                            connection.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(self._channel)))
                except Exception as error:  # noqa: BLE001 — PersistenceError, OSError…: reconnect, poll meanwhile
                    if self._stopping.is_set():
                        break
                    log.warning("log notifications interrupted; relay polls meanwhile", error=type(error).__name__)
                    self._stopping.wait(1.0)

        self._thread = threading.Thread(target=listen, name=f"wakeups:{self._channel}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()


def wakeups_for(settings: Settings, app: Application[Any]) -> LogWakeups | None:
    """NOTIFY-driven wake-ups where the log is in PostgreSQL; ``None`` (polling) otherwise."""
    channel = getattr(app.recorder, "channel_name", None)
    datastore = getattr(app.recorder, "datastore", None)
    if not settings.uses_postgres or channel is None or datastore is None:
        return None
    return LogWakeups(datastore, channel)

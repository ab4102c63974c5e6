"""Wake the relay as soon as the log grows: eventsourcing's PostgreSQL recorder sends
``NOTIFY <channel>`` in every insert transaction; a thread LISTENs and sets an asyncio
event. Without it (SQLite) the relay polls."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
from psycopg import sql

from eventsourcing.application import Application

from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)


class LogWakeups:
    def __init__(self, database_url: str, channel: str) -> None:
        self._database_url = database_url
        self._channel = channel
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        def listen() -> None:
            while not self._stopping.is_set():
                try:
                    with psycopg.connect(self._database_url, autocommit=True) as connection:
                        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                        loop.call_soon_threadsafe(wake.set)  # anything committed while we were away
                        while not self._stopping.is_set():
                            for _ in connection.notifies(timeout=1.0, stop_after=1):
                                loop.call_soon_threadsafe(wake.set)
                except psycopg.Error as error:
                    log.warning("log notifications interrupted; relay polls meanwhile", error=type(error).__name__)
                    self._stopping.wait(1.0)

        self._thread = threading.Thread(target=listen, name=f"wakeups:{self._channel}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()


def wakeups_for(settings: Settings, app: Application[Any]) -> LogWakeups | None:
    """NOTIFY-driven wake-ups where the log is in PostgreSQL; ``None`` (polling) otherwise."""
    channel = getattr(app.recorder, "channel_name", None)
    if not settings.uses_postgres or channel is None:
        return None
    assert settings.database_url is not None
    return LogWakeups(settings.database_url, channel)

"""Electing the one active relay of a log among several processes.

No coordinator of our own: the database is already the source of truth.

* PostgreSQL — :class:`AdvisoryLockElection`: a session-level advisory lock
  (``pg_try_advisory_lock``) held on a **dedicated** connection, never a pooled one.
  The lock lives exactly as long as that session: when the active process is killed
  its socket closes, PostgreSQL ends the session and frees the lock, and a standby's
  next attempt (every ``retry_seconds``) wins. TCP keepalives on the session bound the
  time a vanished *machine* can keep it. ``still_leading`` is a round trip on that same
  session; a session that fails means the lock may be gone.
* SQLite (one machine) — :class:`FileLockElection`: ``flock`` on a file beside the
  database, released by the kernel when the holder dies.
* In memory (one process) — :class:`InProcessElection`: a lock of the process.

The deployment's backend (:mod:`services.common.backends`) chooses which.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Protocol

from services.common.observability import get_logger

log = get_logger(__name__)


class Election(Protocol):
    def campaign(self, stopping: threading.Event) -> bool:
        """Block until elected (``True``) or ``stopping`` is set (``False``)."""
        ...

    def still_leading(self) -> bool:
        """Whether the lock is (still) held; cheap enough to ask once per batch."""
        ...

    def resign(self) -> None:
        """Give the lock up (idempotent, never raises)."""
        ...


class NoElection:
    """A single relay: always elected (in-process tests, tools)."""

    def campaign(self, stopping: threading.Event) -> bool:
        return not stopping.is_set()

    def still_leading(self) -> bool:
        return True

    def resign(self) -> None:
        pass


class InProcessElection:
    """Relays of one process (the memory backend): a lock per log, held by one of them."""

    _locks: dict[str, threading.Lock] = {}
    _guard = threading.Lock()

    def __init__(self, name: str, *, retry_seconds: float = 0.05) -> None:
        with self._guard:
            self._lock = self._locks.setdefault(name, threading.Lock())
        self._retry_seconds = retry_seconds
        self._held = False

    def campaign(self, stopping: threading.Event) -> bool:
        while not stopping.is_set():
            if self._lock.acquire(blocking=False):
                self._held = True
                return True
            stopping.wait(self._retry_seconds)
        return False

    def still_leading(self) -> bool:
        return self._held

    def resign(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()


def lock_id(*parts: str) -> int:
    """A stable signed 64-bit advisory lock key for a relay of one log in one schema."""
    digest = hashlib.sha256("\x1f".join(("imprint.relay", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryLockElection:
    def __init__(self, database_url: str, key: int, *, retry_seconds: float = 0.5) -> None:
        self._database_url = database_url
        self.key = key
        self._retry_seconds = retry_seconds
        self._connection: Any = None
        self._mutex = threading.Lock()

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self._database_url, autocommit=True, connect_timeout=5,
                               keepalives=1, keepalives_idle=2, keepalives_interval=1, keepalives_count=2,
                               application_name="imprint-relay-election")

    def campaign(self, stopping: threading.Event) -> bool:
        import psycopg

        while not stopping.is_set():
            try:
                with self._mutex:
                    if self._connection is None or self._connection.closed:
                        self._connection = self._connect()
                    row = self._connection.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
                if row is not None and row[0]:
                    log.info("relay elected", lock=self.key)
                    return True
            except psycopg.Error as error:
                log.warning("relay election: lock session failed; retrying", error=type(error).__name__)
                self._drop()
            stopping.wait(self._retry_seconds)
        return False

    def still_leading(self) -> bool:
        import psycopg

        try:
            with self._mutex:
                if self._connection is None or self._connection.closed:
                    return False
                self._connection.execute("SELECT 1")
            return True
        except psycopg.Error:
            self._drop()
            return False

    def resign(self) -> None:
        try:
            with self._mutex:
                if self._connection is not None and not self._connection.closed:
                    self._connection.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except Exception:  # noqa: BLE001 — closing the session frees the lock anyway
            self._drop()

    def _drop(self) -> None:
        with self._mutex:
            connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # noqa: BLE001
                pass


class FileLockElection:
    def __init__(self, path: Path, *, retry_seconds: float = 0.5) -> None:
        self._path = path
        self._retry_seconds = retry_seconds
        self._fd: int | None = None

    def campaign(self, stopping: threading.Event) -> bool:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        while not stopping.is_set():
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                stopping.wait(self._retry_seconds)
                continue
            self._fd = fd
            return True
        return False

    def still_leading(self) -> bool:
        return self._fd is not None

    def resign(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

"""The one backend seam: which store technology holds a deployment's logs and tables.

Chosen once, from ``IMPRINT_DATABASE_URL``, the way eventsourcing chooses its persistence
module (``PERSISTENCE_MODULE``), and never asked again. Everything a part keeps is built
by its backend's methods — the logs' eventsourcing environment and poll recorders, the
tables beside them (the key store, the journal's message index, Delivery's views), the
relay's election, the wake-ups, the creation lock — so no caller writes
``if postgres … else sqlite`` or probes what it was given.

============  ======================  ===================================  ==============  ==================
backend       ``IMPRINT_DATABASE_URL`` logs and tables                      relay election  wake-ups
============  ======================  ===================================  ==============  ==================
``sqlite``    unset (the default)      one SQLite file per store under      a file lock     polling (one
                                       ``<state>/data``                                     writer per store)
``postgres``  ``postgresql://…``       the database, in ``IMPRINT_          an advisory     ``LISTEN``/
                                       DATABASE_SCHEMA`` when set           lock            ``NOTIFY``
``memory``    ``memory://``            eventsourcing's in-memory recorders;  in-process      polling
                                       tables in an in-memory SQLite
============  ======================  ===================================  ==============  ==================

The embedded SQLite backend is what ``make run`` shows a newcomer; every tier that
touches a store runs its tests on it as on PostgreSQL."""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote, urlparse

from eventsourcing.persistence import InfrastructureFactory, IntegrityError, InternalError, ProgrammingError
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.utils import Environment, get_topic

from imprint.shredding import InMemoryKeyring, Keyring
from services.common.election import AdvisoryLockElection, Election, FileLockElection, InProcessElection, lock_id
from services.common.keyring import PostgresKeyring, SqliteKeyring
from services.common.recorders import (
    MemoryFactory,
    PollRecorder,
    PostgresPollRecorder,
    PostgresPositions,
    SQLitePollRecorder,
    SQLitePositions,
)
from services.common.settings import Settings
from services.common.tables import PostgresTables, SQLiteTables, Tables
from services.common.wakeups import ChannelListener

T = TypeVar("T")

_COMMON_ENVIRONMENT = {
    "ORIGINATOR_ID_TYPE": "uuid",
    # The library's JSON transcoder, reading with pydantic-core (services/common/transcoding.py).
    "TRANSCODER_TOPIC": "services.common.transcoding:JSONTranscoder",
}


class Backend(ABC):
    """Builds every store of one deployment on one technology."""

    name: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ the logs

    @abstractmethod
    def environment(self, application: str) -> dict[str, str]:
        """The eventsourcing environment of ``application``'s store: its persistence
        module, its poll recorder and where its tables live."""

    def open(self, construct: Callable[[], T], attempts: int = 5) -> T:
        """Construct a store of this deployment (an eventsourcing application, or anything
        that creates tables). Parts and instances starting together would race to create
        the same tables, so creation holds :meth:`creation_lock`; a few retries remain as
        a second line."""
        self.prepare()
        for attempt in range(attempts):
            try:
                with self.creation_lock():
                    return construct()
            except (IntegrityError, InternalError, ProgrammingError):
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def prepare(self) -> None:
        """Create what every store of the deployment needs before any opens."""

    @contextmanager
    def creation_lock(self) -> Iterator[None]:
        """Held while a store of this deployment creates its tables."""
        yield

    @abstractmethod
    def has_log(self, application: str) -> bool:
        """Whether ``application``'s store was ever created (a reader never creates one)."""

    # ------------------------------------------------------------------ beside the logs

    @abstractmethod
    def tables(self, name: str, *, tracking: bool = False) -> Tables:
        """The datastore of the tables named ``name`` (``tracking``: with the Kafka
        positions of a store that follows partitions, recorded in its transactions)."""

    @abstractmethod
    def keyring(self) -> Keyring:
        """The per-conversation key store (X8), shared by Publication and the Journal."""

    @abstractmethod
    def election(self, relay_name: str) -> Election:
        """How the relays of one log elect the one that sends."""

    @abstractmethod
    def log_wakeups(self, recorder: PollRecorder) -> ChannelListener | None:
        """What tells a relay that its log grew (``None``: it polls)."""

    @abstractmethod
    def table_wakeups(self, tables: Tables) -> ChannelListener | None:
        """What tells one instance that another wrote ``tables`` (``None``: one writer only)."""

    # ------------------------------------------------------------------ operators

    def check_reachable(self) -> None:
        """Fail within seconds, with one clear line, when the database does not answer."""

    @abstractmethod
    def describe(self) -> str:
        """Where this deployment's stores are, for a log line."""


class SQLiteBackend(Backend):
    """The embedded default: one SQLite file per store under ``<state>/data``."""

    name = "sqlite"

    @property
    def data_dir(self) -> Path:
        path = Path(self.settings.state_dir) / "data"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _file(self, name: str) -> str:
        return str(self.data_dir / f"{name.lower()}.sqlite")

    @contextmanager
    def creation_lock(self) -> Iterator[None]:
        """An exclusive lock on a file beside the stores (``flock``: between threads and
        processes alike). A new SQLite file is switched to WAL under an exclusive lock that
        SQLite does not wait for, so stores opening the same new file at once take turns."""
        fd = os.open(self.data_dir / ".creation.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def environment(self, application: str) -> dict[str, str]:
        return {
            **_COMMON_ENVIRONMENT,
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "PROCESS_RECORDER_TOPIC": get_topic(SQLitePollRecorder),
            "TRACKING_RECORDER_TOPIC": get_topic(SQLitePositions),
            "SQLITE_DBNAME": self._file(application),
            "SQLITE_LOCK_TIMEOUT": "10",
        }

    def has_log(self, application: str) -> bool:
        return Path(self._file(application)).exists()

    def tables(self, name: str, *, tracking: bool = False) -> Tables:
        return _tables(SQLiteTables, self.environment(name), name, tracking)

    def keyring(self) -> Keyring:
        return SqliteKeyring(self.tables("keyring"))

    def election(self, relay_name: str) -> Election:
        safe = "".join(c if c.isalnum() else "_" for c in relay_name)
        return FileLockElection(self.data_dir / f"{safe}.lock")

    def log_wakeups(self, recorder: PollRecorder) -> None:
        return None

    def table_wakeups(self, tables: Tables) -> None:
        return None

    def describe(self) -> str:
        return f"sqlite in {self.data_dir}"


class PostgresBackend(Backend):
    """PostgreSQL: every store of the deployment in one database (in its schema when set)."""

    name = "postgres"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        assert settings.database_url is not None
        self.url = settings.database_url
        self.schema = settings.database_schema or ""

    def environment(self, application: str) -> dict[str, str]:
        url = urlparse(self.url)
        env = {
            **_COMMON_ENVIRONMENT,
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "PROCESS_RECORDER_TOPIC": get_topic(PostgresPollRecorder),
            "TRACKING_RECORDER_TOPIC": get_topic(PostgresPositions),
            "POSTGRES_DBNAME": url.path.lstrip("/") or "imprint",
            "POSTGRES_HOST": url.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(url.port or 5432),
            "POSTGRES_USER": unquote(url.username or "imprint"),
            "POSTGRES_PASSWORD": unquote(url.password or ""),
            "POSTGRES_POOL_SIZE": "4",
            "POSTGRES_MAX_OVERFLOW": "4",
            "POSTGRES_CONNECT_TIMEOUT": "5",
            # No pre-ping: it costs a round trip per checkout; a dead pooled connection
            # surfaces as an OperationalError that eventsourcing retries and we treat as transient.
            "POSTGRES_PRE_PING": "n",
        }
        if self.schema:
            env["POSTGRES_SCHEMA"] = self.schema
        return env

    def datastore(self, pool_size: int = 4) -> PostgresDatastore:
        """A datastore of its own (its pool) in the deployment's schema."""
        url = urlparse(self.url)
        return PostgresDatastore(
            dbname=url.path.lstrip("/") or "imprint", host=url.hostname or "127.0.0.1", port=url.port or 5432,
            user=unquote(url.username or "imprint"), password=unquote(url.password or ""),
            pool_size=pool_size, max_overflow=pool_size, schema=self.schema,
        )

    def prepare(self) -> None:
        """Create the configured schema if it is missing (eventsourcing creates tables, not
        schemas). ``CREATE SCHEMA IF NOT EXISTS`` is not atomic against a concurrent creator
        (the loser dies with ``UniqueViolation``), so the schema, like every table, is created
        under the creation lock; an existing schema is seen without taking it."""
        if not self.schema:
            return
        import psycopg
        from psycopg import sql

        exists = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
        with psycopg.connect(self.url, autocommit=True) as connection:
            if connection.execute(exists, (self.schema,)).fetchone():
                return
            with _advisory_lock(connection, CREATION_LOCK):
                if not connection.execute(exists, (self.schema,)).fetchone():
                    connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))

    @contextmanager
    def creation_lock(self) -> Iterator[None]:
        """A session advisory lock on a connection of its own."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection, _advisory_lock(connection, CREATION_LOCK):
            yield

    def has_log(self, application: str) -> bool:
        import psycopg

        table = f'"{self.schema}".{application}_events' if self.schema else f"{application}_events"
        with psycopg.connect(self.url, connect_timeout=5) as connection:
            row = connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        return row is not None and row[0] is not None

    def tables(self, name: str, *, tracking: bool = False) -> Tables:
        self.prepare()
        return _tables(PostgresTables, self.environment(name), name, tracking, datastore=self.datastore)

    def keyring(self) -> Keyring:
        return PostgresKeyring(self.tables("keyring"))

    def election(self, relay_name: str) -> Election:
        return AdvisoryLockElection(self.url, lock_id(self.schema, relay_name))

    def log_wakeups(self, recorder: PollRecorder) -> ChannelListener:
        assert isinstance(recorder, PostgresPollRecorder)
        return ChannelListener(recorder.datastore, recorder.channel_name)

    def table_wakeups(self, tables: Tables) -> ChannelListener:
        assert isinstance(tables, PostgresTables)
        return ChannelListener(tables.datastore, tables.channel)

    def check_reachable(self) -> None:
        import psycopg

        psycopg.connect(self.url, connect_timeout=5).close()

    def describe(self) -> str:
        url = urlparse(self.url)
        return f"postgresql on {url.hostname}:{url.port or 5432}/{url.path.lstrip('/')}" + (
            f" schema {self.schema}" if self.schema else "")


class MemoryBackend(Backend):
    """Everything in this process's memory, gone when it ends: for tests of one process."""

    name = "memory"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._instance = uuid.uuid4().hex
        self._keyring = InMemoryKeyring()

    def environment(self, application: str) -> dict[str, str]:
        return {**_COMMON_ENVIRONMENT, "PERSISTENCE_MODULE": get_topic(MemoryFactory)}

    def has_log(self, application: str) -> bool:
        return False  # a reader in another process sees nothing of this one's memory

    def tables(self, name: str, *, tracking: bool = False) -> Tables:
        env = {
            **_COMMON_ENVIRONMENT,
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "TRACKING_RECORDER_TOPIC": get_topic(SQLitePositions),
            "SQLITE_DBNAME": f"file:imprint-{self._instance}-{name}?mode=memory&cache=shared",
        }
        return _tables(SQLiteTables, env, name, tracking)

    def keyring(self) -> Keyring:
        return self._keyring

    def election(self, relay_name: str) -> Election:
        return InProcessElection(f"{self._instance}:{relay_name}")

    def log_wakeups(self, recorder: PollRecorder) -> None:
        return None

    def table_wakeups(self, tables: Tables) -> None:
        return None

    def describe(self) -> str:
        return "memory (this process only)"


def _tables(cls: type[Tables], env: dict[str, str], name: str, tracking: bool,
            datastore: Callable[[], Any] | None = None) -> Tables:
    if tracking:
        factory = InfrastructureFactory.construct(Environment(name=name, env=env))
        positions = factory.tracking_recorder()
        return cls(positions.datastore, name, positions)  # type: ignore[arg-type]
    if datastore is not None:
        return cls(datastore(), name)
    return cls(SQLiteDatastore(env["SQLITE_DBNAME"], lock_timeout=10, pool_size=2, max_overflow=4), name)


CREATION_LOCK = 0x1A9B_7C01
"""The advisory lock id that serializes table creation of imprint's stores."""


@contextmanager
def _advisory_lock(connection: Any, key: int) -> Iterator[None]:
    connection.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        yield
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s)", (key,))


BACKENDS: dict[str, type[Backend]] = {"postgresql": PostgresBackend, "postgres": PostgresBackend,
                                      "memory": MemoryBackend}
"""URL scheme of ``IMPRINT_DATABASE_URL`` → backend; unset is the embedded SQLite."""


def backend_for(settings: Settings) -> Backend:
    """The backend ``settings`` name. One per database, schema and state folder in a
    process, so its stores share it (the memory backend's key store above all)."""
    key = (settings.database_url, settings.database_schema, str(settings.state_dir))
    backend = _CHOSEN.get(key)
    if backend is None:
        backend = _CHOSEN[key] = _choose(settings)
    return backend


def _choose(settings: Settings) -> Backend:
    url = settings.database_url
    if not url:
        return SQLiteBackend(settings)
    scheme = urlparse(url).scheme
    if scheme not in BACKENDS:
        raise ValueError(f"IMPRINT_DATABASE_URL {url.split('@')[-1]!r}: expected postgresql://… or memory://"
                         " (unset: the embedded SQLite under the state folder)")
    return BACKENDS[scheme](settings)


_CHOSEN: dict[tuple[str | None, str | None, str], Backend] = {}

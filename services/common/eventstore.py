"""eventsourcing environments: PostgreSQL (psycopg 3) when ``IMPRINT_DATABASE_URL`` is
set, otherwise the embedded SQLite store under the project's local state folder.

Each application gets its own table prefix (PostgreSQL schema-less names
``<app>_events``/``<app>_tracking``) or its own SQLite file, so Publication,
Journal and Delivery never share a table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from services.common.settings import Settings

T = TypeVar("T")


@contextmanager
def reading(datastore: Any) -> Iterator[Any]:
    """A cursor for a read of one statement (or of several that need no common snapshot).

    On PostgreSQL it is the datastore's own autocommit cursor (``PostgresDatastore.cursor``,
    how eventsourcing's recorders read): no ``BEGIN`` and no ``ROLLBACK`` around the
    statement. A read transaction cost three round trips, and psycopg forgets every
    statement it prepared on a connection at each ``ROLLBACK`` (``DEALLOCATE ALL``), so
    the next prepared statements on that connection were parsed and planned again. Reads
    that need one snapshot stay in a transaction. Elsewhere (SQLite, in-process) it is
    the datastore's read transaction."""
    from eventsourcing.postgres import PostgresDatastore

    if isinstance(datastore, PostgresDatastore):
        with datastore.cursor() as cursor:
            yield cursor
    else:
        with datastore.transaction(commit=False) as cursor:
            yield cursor


def store_environment(settings: Settings, application: str) -> dict[str, str]:
    """The eventsourcing ``env`` for one application of this deployment."""
    env: dict[str, str] = {
        "ORIGINATOR_ID_TYPE": "uuid",
        # The library's JSON transcoder, reading with pydantic-core (services/common/transcoding.py).
        "TRANSCODER_TOPIC": "services.common.transcoding:JSONTranscoder",
    }
    if settings.uses_postgres:
        assert settings.database_url is not None
        url = urlparse(settings.database_url)
        env.update(
            PERSISTENCE_MODULE="eventsourcing.postgres",
            POSTGRES_DBNAME=url.path.lstrip("/") or "imprint",
            POSTGRES_HOST=url.hostname or "127.0.0.1",
            POSTGRES_PORT=str(url.port or 5432),
            POSTGRES_USER=unquote(url.username or "imprint"),
            POSTGRES_PASSWORD=unquote(url.password or ""),
            POSTGRES_POOL_SIZE="4",
            POSTGRES_MAX_OVERFLOW="4",
            POSTGRES_CONNECT_TIMEOUT="5",
            # No pre-ping: it costs a round trip per checkout; a dead pooled connection
            # surfaces as an OperationalError that eventsourcing retries and we treat as transient.
            POSTGRES_PRE_PING="n",
        )
        if settings.database_schema:
            env["POSTGRES_SCHEMA"] = settings.database_schema
    else:
        data_dir = Path(settings.state_dir) / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            PERSISTENCE_MODULE="eventsourcing.sqlite",
            SQLITE_DBNAME=str(data_dir / f"{application.lower()}.sqlite"),
            SQLITE_LOCK_TIMEOUT="10",
        )
    return env


def ensure_schema(settings: Settings) -> None:
    """Create the configured PostgreSQL schema if it is missing (eventsourcing creates tables, not schemas).

    Parts and instances starting at once on a fresh schema would race here:
    ``CREATE SCHEMA IF NOT EXISTS`` is not atomic against a concurrent creator (the
    loser dies with ``UniqueViolation`` on ``pg_namespace_nspname_index``), so the
    schema, like every table, is created under the creation lock; an existing schema
    is seen without taking it."""
    if not (settings.uses_postgres and settings.database_schema):
        return
    import psycopg
    from psycopg import sql

    assert settings.database_url is not None
    exists = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        if connection.execute(exists, (settings.database_schema,)).fetchone():
            return
        with _held(connection):
            if not connection.execute(exists, (settings.database_schema,)).fetchone():
                connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(settings.database_schema)))


def open_application(settings: Settings, construct: Callable[[], T], attempts: int = 5) -> T:
    """Construct an eventsourcing application. Processes starting together would race
    to create the same tables (PostgreSQL reports a duplicate type or table, or a
    catalog tuple concurrently updated), so on PostgreSQL construction holds an
    advisory lock; a few retries remain as a second line."""
    import time

    from eventsourcing.persistence import IntegrityError, InternalError, ProgrammingError

    for attempt in range(attempts):
        try:
            with creation_lock(settings):
                return construct()
        except (IntegrityError, InternalError, ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


@contextmanager
def creation_lock(settings: Settings) -> Iterator[None]:
    """Held while a store of this deployment creates its schema or tables (PostgreSQL:
    a session advisory lock on its own connection; SQLite: nothing, its files serialize)."""
    if not settings.uses_postgres:
        yield
        return
    import psycopg

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url, autocommit=True) as connection, _held(connection):
        yield


@contextmanager
def _held(connection: Any) -> Iterator[None]:
    connection.execute("SELECT pg_advisory_lock(%s)", (CREATION_LOCK,))
    try:
        yield
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s)", (CREATION_LOCK,))


CREATION_LOCK = 0x1A9B_7C01
"""The advisory lock id that serializes table creation of imprint's stores."""

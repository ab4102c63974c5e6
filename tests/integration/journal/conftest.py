"""Fixtures for the journal's PostgreSQL integration tests.

Database: ``IMPRINT_DATABASE_URL`` or postgresql://imprint:imprint@127.0.0.1:5432/imprint_test.
Each test gets its own schema (dropped afterwards), so event, tracking, key and index tables of
concurrent tests never meet."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from services.common.settings import Settings
from services.common.eventstore import ensure_schema
from services.journal.application import RuntimeJournal

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "journal"))  # journal_helpers

DEFAULT_URL = "postgresql://imprint:imprint@127.0.0.1:5432/imprint_test"


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("IMPRINT_DATABASE_URL") or DEFAULT_URL
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError as e:  # never a silent skip
        raise RuntimeError(f"PostgreSQL not reachable at {url}: start it with `bash deploy/local/postgres.sh up`") from e
    return url


@pytest.fixture
def pg_settings(pg_url: str, tmp_path: Path) -> Iterator[Settings]:
    schema = f"jt_{uuid.uuid4().hex[:12]}"
    settings = Settings(database_url=pg_url, database_schema=schema, state_dir=tmp_path / "state")
    ensure_schema(settings)
    yield settings
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def open_journal(pg_settings: Settings) -> Iterator[Callable[[], RuntimeJournal]]:
    """Opens journal instances over the test's schema — each like a separate journal process."""
    opened: list[RuntimeJournal] = []

    def make() -> RuntimeJournal:
        journal = RuntimeJournal.from_settings(pg_settings)
        opened.append(journal)
        return journal

    yield make
    for journal in opened:
        journal.close()


@pytest.fixture
def sql_rows(pg_settings: Settings) -> Callable[[], str]:
    """Every row of every table of the test's schema, cast to text (what a logical dump holds)."""

    def dump() -> str:
        out: list[str] = []
        with psycopg.connect(pg_settings.database_url) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
                (pg_settings.database_schema,),
            ).fetchall()
            for (table,) in tables:
                ident = sql.Identifier(pg_settings.database_schema, table)
                for (row,) in conn.execute(sql.SQL("SELECT t::text FROM {} AS t").format(ident)):
                    out.append(row)
                # bytea columns render as hex in t::text; add decoded bytes too
                cols = conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s AND data_type = 'bytea'",
                    (pg_settings.database_schema, table),
                ).fetchall()
                for (col,) in cols:
                    for (value,) in conn.execute(sql.SQL("SELECT {} FROM {}").format(sql.Identifier(col), ident)):
                        if value is not None:
                            out.append(bytes(value).decode("utf-8", errors="replace"))
        return "\n".join(out)

    return dump

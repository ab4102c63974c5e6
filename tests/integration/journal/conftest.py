"""Fixtures for the journal's PostgreSQL integration tests.

Database: the tests' one ``database_url`` fixture (tests/conftest.py). Each test gets its own schema (dropped afterwards), so event, tracking, key and index tables of
concurrent tests never meet."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from services.common.settings import Settings
from services.common.backends import backend_for
from services.journal.application import RuntimeJournal
from tests.support.postgres import drop_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "journal"))  # journal_helpers

@pytest.fixture
def pg_settings(database_url: str, tmp_path: Path) -> Iterator[Settings]:
    schema = f"jt_{uuid.uuid4().hex[:12]}"
    settings = Settings(database_url=database_url, database_schema=schema, state_dir=tmp_path / "state")
    backend_for(settings).prepare()
    yield settings
    drop_schema(settings)


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

"""Fixtures for the journal's integration tests, on each store backend (``store_backend``).

Each test gets its own stores (a PostgreSQL schema dropped afterwards, or SQLite files under
its own state folder), so event, tracking, key and index tables of concurrent tests never meet."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.settings import Settings
from services.common.backends import backend_for
from services.journal.application import RuntimeJournal
from tests.support.dump import dump_schema
from tests.support.postgres import drop_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "component" / "journal"))  # journal_helpers

@pytest.fixture
def journal_settings(store_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """The journal's stores on the test's backend: a schema of its own, or SQLite files under
    its own state folder."""
    postgres = store_backend == "postgres"
    settings = Settings(database_url=request.getfixturevalue("database_url") if postgres else None,
                        database_schema=f"jt_{uuid.uuid4().hex[:12]}" if postgres else None,
                        state_dir=tmp_path / "state")
    backend_for(settings).prepare()
    yield settings
    drop_schema(settings)


@pytest.fixture
def open_journal(journal_settings: Settings) -> Iterator[Callable[[], RuntimeJournal]]:
    """Opens journal instances over the test's stores — each like a separate journal process."""
    opened: list[RuntimeJournal] = []

    def make() -> RuntimeJournal:
        journal = RuntimeJournal.from_settings(journal_settings)
        opened.append(journal)
        return journal

    yield make
    for journal in opened:
        journal.close()


@pytest.fixture
def sql_rows(journal_settings: Settings) -> Callable[[], str]:
    """Every row of every table of the test's stores, as text (what a dump of them holds)."""
    return lambda: dump_schema(journal_settings)

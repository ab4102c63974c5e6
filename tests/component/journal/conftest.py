"""Fixtures for the journal unit tests: an in-memory (POPO) journal and an in-memory keyring."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from journal_helpers import Feeder

from imprint.shredding import InMemoryKeyring
from tests.support.backends import memory_environment
from services.journal.application import RuntimeJournal
from services.journal.queries import JournalQueries


@pytest.fixture
def keyring() -> InMemoryKeyring:
    return InMemoryKeyring()


@pytest.fixture
def journal(keyring: InMemoryKeyring) -> Iterator[RuntimeJournal]:
    app = RuntimeJournal(memory_environment("journal"), keyring=keyring)
    yield app
    app.close()


@pytest.fixture
def feed(journal: RuntimeJournal) -> Feeder:
    return Feeder(journal)


@pytest.fixture
def queries(journal: RuntimeJournal) -> JournalQueries:
    return JournalQueries(journal)

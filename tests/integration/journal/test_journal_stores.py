"""The journal's tracked batches, one body per rule on each store backend (the
``backend`` fixture: in memory, SQLite, PostgreSQL), as eventsourcing runs one test
class per persistence module."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from journal_helpers import Feeder, completed, to_running, tombstoned

from imprint.contracts.topics import Topic
from imprint.shredding import InMemoryKeyring
from services.journal.application import RuntimeJournal
from tests.support.backends import Backend

pytestmark = pytest.mark.integration


@pytest.fixture
def open_journal(backend: Backend) -> Iterator[Callable[[], RuntimeJournal]]:
    """Opens journal instances over the backend's store — each like a separate journal process."""
    opened: list[RuntimeJournal] = []

    def make() -> RuntimeJournal:
        journal = RuntimeJournal(backend.environment("journal"), keyring=InMemoryKeyring())
        opened.append(journal)
        return journal

    yield make
    for journal in opened:
        journal.close()


@pytest.mark.rule("X2")
def test_redelivered_batch_is_a_noop_thanks_to_tracking(open_journal: Callable[[], RuntimeJournal]) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    batch = feed(*to_running("r1"), completed("r1"))
    name = f"{Topic.RUNTIME}#0"
    assert journal.recorder.max_tracking_id(name) == 3
    top = journal.recorder.max_notification_id()
    journal.process(batch)
    journal.process(batch[1:3])
    assert journal.recorder.max_notification_id() == top


@pytest.mark.rule("X2")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)  # a restart needs a durable store
def test_redelivered_batch_with_same_offsets_is_a_noop(open_journal: Callable[[], RuntimeJournal]) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    batch = feed(*to_running("r1"), completed("r1"), tombstoned("src-a"))
    count = journal.recorder.max_notification_id()
    journal.process(batch)
    open_journal().process(batch)  # a restarted consumer re-reading from an older Kafka offset
    assert journal.recorder.max_notification_id() == count
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") == 3
    assert journal.recorder.max_tracking_id(f"{Topic.SOURCES}#0") == 0
    assert journal.execution("r1").refusals == []

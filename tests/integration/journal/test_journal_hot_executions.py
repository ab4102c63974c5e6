"""The Journal's hot executions, on each store backend: it keeps the runs in flight in
memory, not every run it has seen (``RuntimeJournal.kept_after_done``)."""

from __future__ import annotations

from typing import Any

import pytest
from journal_helpers import Clock, Feeder, completed, leased, published, to_running

from imprint.journal import ids

pytestmark = pytest.mark.integration


@pytest.mark.rule("P19")
def test_a_closed_execution_stays_hot_for_the_publications_that_trail_it_and_then_leaves(open_journal) -> None:
    """The Journal keeps the runs in flight in memory, not every run it has seen: a closed
    execution stays a minute for Publication's trailing ``answer.published``, then leaves; a
    later one reads it back from the log and is recorded all the same."""
    clock = Clock()
    journal = leased(open_journal(), clock)
    cache: Any = journal.repository.cache
    feed = Feeder(journal)
    execution_id = ids.execution_id("r-done")
    feed.send(*to_running("r-done"), completed("r-done"), partition=0)
    assert execution_id in cache.cache, "just closed: kept"
    clock.now += journal.kept_after_done - 1
    feed.send(published("r-done", "tool:c1", "blk-1"), partition=1)
    assert execution_id in cache.cache
    clock.now += 1
    feed.send(*to_running("r-next", message_id="m-next"), partition=0)
    assert execution_id not in cache.cache, "a minute after its end it leaves"
    assert ids.execution_id("r-next") in cache.cache, "a run in flight stays"

    feed.send(published("r-done", "tool:c2", "blk-2"), partition=1)
    assert [e.block_id for e in journal.execution("r-done").effects] == ["blk-1", "blk-2"]
    again = leased(open_journal(), clock)
    assert [e.block_id for e in again.execution("r-done").effects] == ["blk-1", "blk-2"], "as stored"

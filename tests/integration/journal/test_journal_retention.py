"""X8's retention sweep on each store backend: it follows the Journal's own log from a
recorded position, so a sweep reads what the log gained since the last one (never the
whole history), a conversation active after its start was examined is deleted once its
last activity ages, and a second instance continues where the first stopped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from journal_helpers import Feeder, completed, to_running

from services.journal.application import RETENTION_TRACKING, RuntimeJournal

pytestmark = [pytest.mark.integration, pytest.mark.rule("X8")]


def _counting_decodes(journal: RuntimeJournal) -> list[int]:
    """Counts the stored events ``journal`` decodes from now on (every read goes through its mapper)."""
    count = [0]
    decode = journal.mapper.to_domain_event

    def counted(stored: Any) -> Any:
        count[0] += 1
        return decode(stored)

    journal.mapper.to_domain_event = counted  # type: ignore[method-assign]
    return count


def test_a_sweep_reads_what_the_log_gained_since_the_last(open_journal: Callable[[], RuntimeJournal]) -> None:
    first = open_journal()
    feed = Feeder(first)
    for n in range(12):
        feed(*to_running(f"r-old-{n}", conversation_id=f"old-{n}", message_id=f"m-old-{n}"), completed(f"r-old-{n}"))
    for n in range(8):
        feed(*to_running(f"r-young-{n}", conversation_id=f"young-{n}", message_id=f"m-young-{n}"))
    t_old = first.conversation("old-11").last_activity_at
    t_young = first.conversation("young-0").last_activity_at
    now = t_young + timedelta(days=31)
    max_age = now - (t_old + (t_young - t_old) / 2)

    assert sorted(first.sweep_retention(now, max_age)) == sorted(f"old-{n}" for n in range(12))
    position = first.sink.position(RETENTION_TRACKING)
    assert position > 0

    decodes = _counting_decodes(first)
    assert first.sweep_retention(now, max_age) == []
    assert decodes[0] == 1  # the first activity past the position, too young; nothing before it again

    second = open_journal()  # another instance over the same log continues from the recorded position
    decodes = _counting_decodes(second)
    assert second.sweep_retention(now, max_age) == []
    assert decodes[0] == 1 and second.sink.position(RETENTION_TRACKING) == position

    assert sorted(second.sweep_retention(now, timedelta(days=30))) == sorted(f"young-{n}" for n in range(8))
    assert all(second.conversation(f"young-{n}").deletion_reason == "retention" for n in range(8))


def test_a_conversation_active_since_its_start_was_examined_goes_when_its_last_activity_ages(
    open_journal: Callable[[], RuntimeJournal],
) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    feed(*to_running("r1", conversation_id="c", message_id="m1"), completed("r1"))
    t_first = journal.conversation("c").last_activity_at
    feed(*to_running("r2", conversation_id="c", message_id="m2"), completed("r2"))
    t_last = journal.conversation("c").last_activity_at
    assert t_first < t_last
    now = t_last + timedelta(days=31)

    between = now - (t_first + (t_last - t_first) / 2)
    assert journal.sweep_retention(now, between) == []  # examined at its start; active since
    assert journal.sink.position(RETENTION_TRACKING) > 0 and not journal.conversation("c").deleted

    assert journal.sweep_retention(now, timedelta(days=30)) == ["c"]
    assert journal.sweep_retention(now, timedelta(days=30)) == []  # deleted once
    assert journal.execution("r1").erased and journal.execution("r2").erased

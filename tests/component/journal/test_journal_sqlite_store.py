"""The zero-setup store: RuntimeJournal.from_settings without a database URL (SQLite files under state_dir)."""

from __future__ import annotations

import pytest
from journal_helpers import ACCOUNT, ANSWER, Feeder, completed, delete_requested, to_running

from services.common.settings import Settings
from services.common.keyring import SqliteKeyring
from services.journal.application import RuntimeJournal, open_journal
from services.journal.queries import JournalQueries
from services.journal.relay import BatchAnnouncer


@pytest.mark.rule("X8")
def test_sqlite_journal_survives_restart_and_shreds(tmp_path) -> None:
    settings = Settings(state_dir=tmp_path, database_url=None)
    journal = open_journal(settings)
    assert isinstance(journal.keyring, SqliteKeyring)
    feed = Feeder(journal)
    batch = feed(*to_running("r1", message_id="m1"), completed("r1"))
    journal.close()

    reopened = RuntimeJournal.from_settings(settings)
    reopened.process(batch)  # tracking survived the restart: a no-op
    queries = JournalQueries(reopened)
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.answer_text == ANSWER and view.refusals == []
    assert queries.history("conv-1", ACCOUNT, {"r1": "completed"}).items[0].status == "ok"  # index persisted
    feed.journal = reopened
    feed(delete_requested())
    reopened.close()

    data = tmp_path / "data"
    assert sorted(p.name for p in data.iterdir() if p.suffix == ".sqlite") == ["journal.sqlite", "journal_index.sqlite", "keyring.sqlite"]
    for path in data.iterdir():
        assert ANSWER.encode() not in path.read_bytes()
    final = RuntimeJournal.from_settings(settings)
    assert JournalQueries(final).execution("r1", ACCOUNT, "completed").display == "deleted"
    final.close()


@pytest.mark.rule("X4")
def test_service_announcer_opens_run_closed_with_the_keyring(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1"))
    relay_announce = BatchAnnouncer(journal)

    def produce() -> list:
        notifications = journal.recorder.select_notifications(start=1, limit=100)
        return [item for event in relay_announce.to_events(notifications) for item in relay_announce(event)]

    produced = produce()
    closed = [m for _, m in produced if m.type == "run.closed"]
    assert len(closed) == 1 and closed[0].answer_text == ANSWER
    assert {str(t) for t, _ in produced} == {"imprint.runs.v1"}
    feed(delete_requested())  # the next batch never opens with a key cached before the deletion
    closed = [m for _, m in produce() if m.type == "run.closed"]
    assert len(closed) == 1 and not closed[0].answer_text

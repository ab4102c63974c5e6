"""R1 with R8: recovery reads every event an earlier release stored. Each golden log, put
back on each backend, is folded whole (the Publication log in notification order, every
aggregate's events) and each run's execution is read from the journal's store: no event
falls outside recovery's tables — no ledger entry says its type is unknown, no defect or
orphan names an unknown type, no journal event is left unread — and the run's end, lease
lapse and deletion that the log holds are its log lifecycle."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from imprint.recovery import export_history
from services.common.settings import Settings
from services.publication.application import open_log
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import read_fold
from tests.golden.folder import BACKENDS, LOGS, Golden, releases, restored

pytestmark = [pytest.mark.rule("R1"), pytest.mark.rule("R8")]


@pytest.mark.integration
@pytest.mark.rule("R7")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", releases())
def test_recovery_reads_every_event_of_a_golden_log(
    release: str, backend: str, kafka_bootstrap: str, database_url: str, tmp_path: Path,
) -> None:
    golden = Golden(LOGS / release)
    assert not golden.problems()
    held = golden.manifest["event_types"]
    base = Settings(_env_file=None,  # type: ignore[call-arg]
                    kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    with restored(golden.path, backend, base, tmp_path / "state") as settings:
        app = open_log(settings)
        try:
            fold = read_fold(app)
        finally:
            app.close()
        with JournalReader(settings) as journal:
            facts = {run_id: journal.run(run_id) for run_id in golden.runs}

    assert sorted(fold.runs) == sorted(golden.runs) and fold.orphans == []
    trail = [entry for ledger in fold.runs.values() for entry in ledger.trail]
    run_types = {topic.rsplit(".", 1)[1]: count for topic, count in held["publication"].items()
                 if ":PublicationRun." in topic}
    assert Counter(entry["type"] for entry in trail) == run_types, "every run event of the log is in a trail"
    assert [entry for entry in trail if "note" in entry] == [], "no event type unknown to recovery"
    assert [d for ledger in fold.runs.values() for d in ledger.defects if d.reason == "unknown_event_type"] == []
    for ledger in fold.runs.values():
        assert "unknown to recovery" not in repr(export_history(ledger))
    ended = {run_id: ledger.lifecycle()["ended"] for run_id, ledger in fold.runs.items()}
    assert sum(state is not None for state in ended.values()) == run_types.get("Ended", 0)
    deleted = [run_id for run_id, ledger in fold.runs.items() if ledger.conversation_deleted is not None]
    assert len(deleted) == run_types.get("ConversationDeleted", 0)
    if "SourceStandingChanged" in run_types:
        assert any(ledger.source_changes for ledger in fold.runs.values())

    assert journal.availability == "consulted"
    assert all(f is not None and f.found and f.unread == () for f in facts.values()), facts
    erased = [run_id for run_id, f in facts.items() if f is not None and f.erased]
    assert erased == deleted, "the journal erased the executions of the conversation the log deleted"

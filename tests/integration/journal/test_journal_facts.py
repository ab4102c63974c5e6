"""The journal on each store backend: refusals, QCS, verified index, redaction, tracking, shredding in a dump."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from urllib.parse import urlparse

import psycopg
import pytest
from journal_helpers import (
    ACCOUNT,
    Feeder,
    admitted,
    completed,
    delete_requested,
    granted,
    qcs,
    to_running,
    tombstoned,
)
from psycopg import sql

from imprint.contracts.runtime import Condition, RunFailed, RunStage, RunStarted
from imprint.contracts.topics import Topic
from imprint.journal.lifecycle import State
from services.journal.queries import JournalQueries

pytestmark = pytest.mark.integration


def _count_events(journal) -> int:
    return len(journal.recorder.select_notifications(start=1, limit=1_000_000))


@pytest.mark.rule("X2")
def test_contradictory_terminal_events_are_refused_and_recorded(open_journal) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    feed(*to_running("r1"), completed("r1", "answered"))
    feed(completed("r1", "declined", answer="I decline."), RunFailed(run_id="r1", reason="late failure"), RunStarted(run_id="r1"))
    reread = open_journal().execution("r1")  # a fresh process reads the stored facts
    assert reread.state is State.COMPLETED and reread.outcome == "answered"
    assert [(r.message_type, r.code) for r in reread.refusals] == [
        ("run.completed", "contradictory_completion"),
        ("run.failed", "already_terminal"),
        ("run.started", "already_terminal"),
    ]
    assert [t.state for t in reread.transitions] == [State.ADMITTED, State.QUEUED, State.RUNNING, State.COMPLETED]


@pytest.mark.rule("X3")
def test_qcs_inherited_within_a_conversation_and_refused_across(open_journal) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    feed(admitted("r1", conversation_id="conv-1", qcs_set=qcs("q1")))
    inherited = [Condition(name="period", value="2024 Q3 secret-cond", source="inherited")]
    feed(admitted("r2", conversation_id="conv-1", message_id="m2", qcs_set=qcs("q2", inherits_from="q1", conditions=inherited)))
    feed(admitted("r3", conversation_id="conv-2", message_id="m3", qcs_set=qcs("q3", inherits_from="q1", conditions=inherited)))
    feed(admitted("r4", conversation_id="conv-1", message_id="m4", qcs_set=qcs("q1")))
    other = open_journal()
    assert other.execution("r2").admitted and other.execution("r2").request.inherits_from == "q1"
    assert [r.code for r in other.execution("r3").refusals] == ["qcs_cross_conversation"]
    assert [r.code for r in other.execution("r4").refusals] == ["qcs_reused"]
    assert other.conversation("conv-2") is None


@pytest.mark.rule("X4")
def test_tampered_lookup_index_is_detected(open_journal) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    feed(*to_running("r1", message_id="m1"), completed("r1"))
    feed(*to_running("r2", message_id="m2"), completed("r2", answer="Another answer"))
    queries = JournalQueries(journal)
    states = {"r1": "completed", "r2": "completed"}
    assert [i.status for i in queries.history("conv-1", ACCOUNT, states).items] == ["ok", "ok"]
    index = journal.message_index  # its table, written behind the journal's back
    with index.tables.transaction(commit=True) as cursor:
        cursor.execute(index._q("UPDATE {t} SET run_id = 'r2' WHERE message_id = 'm1'"))
    items = {i.message_id: i for i in queries.history("conv-1", ACCOUNT, states).items}
    assert items["m1"].status == "integrity_error" and items["m1"].error == "binding_mismatch" and items["m1"].execution is None
    with index.tables.transaction(commit=True) as cursor:
        cursor.execute(index._q("DELETE FROM {t} WHERE message_id = 'm1'"))
    items = {i.message_id: i for i in queries.history("conv-1", ACCOUNT, states).items}
    assert items["m1"].status == "not_found" and items["m1"].execution is None  # no fallback to r2 or "latest"
    assert items["m2"].status == "ok" and items["m2"].execution.answer_text == "Another answer"
    assert journal.rebuild_message_index("conv-1") == 2
    assert [i.status for i in queries.history("conv-1", ACCOUNT, states).items] == ["ok", "ok"]


@pytest.mark.rule("X7")
def test_redaction_while_the_run_is_still_generating(open_journal) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    feed(*to_running("r1"), granted("r1", "src-a"))
    feed(tombstoned("src-a"))
    feed(completed("r1", sources=("src-a", "src-b")))
    view = JournalQueries(open_journal()).execution("r1", ACCOUNT, "completed")
    assert [(e.source_id, e.redacted, e.excerpt is None) for e in view.evidence] == [("src-a", True, True), ("src-b", False, False)]
    assert (view.snapshot_id, view.knowledge_version) == ("snap-7", "kv-2024.09")


@pytest.mark.rule("X2")
def test_events_and_tracking_commit_together(open_journal, monkeypatch) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    batch = feed.wrap(*to_running("r1"))
    monkeypatch.setattr(journal.message_index, "point_many", lambda *a: (_ for _ in ()).throw(RuntimeError("after commit")))
    with pytest.raises(RuntimeError):
        journal.process(batch)
    # the transaction committed (events + tracking) before the index write failed
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") == 2
    count = _count_events(journal)
    journal.process(batch)
    assert _count_events(journal) == count
    monkeypatch.undo()
    assert journal.rebuild_message_index("conv-1") == 1


def _dump(settings) -> str | None:
    if shutil.which("pg_dump") is None:
        return None
    url = urlparse(settings.database_url)
    env = {**os.environ, "PGPASSWORD": url.password or ""}
    out = subprocess.run(
        ["pg_dump", "-h", url.hostname or "127.0.0.1", "-p", str(url.port or 5432), "-U", url.username or "imprint", "-n", settings.database_schema, "--data-only", url.path.lstrip("/")],
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    text = out.stdout.decode("utf-8", errors="replace")
    # bytea columns (the events' JSON state, the key column) are dumped as hex: decode them so the
    # plaintext scan sees their content, not just their hex
    decoded = [bytes.fromhex(h).decode("utf-8", errors="replace") for h in re.findall(r"\\\\x([0-9a-f]+)", text)]
    return "\n".join([text, *decoded])


@pytest.mark.rule("X8")
@pytest.mark.backends("postgres", reason="pg_dump and VACUUM of the key table; test_retention_sweep covers both")
def test_after_deletion_no_private_string_is_in_any_table_or_dump(open_journal, journal_settings, sql_rows) -> None:
    journal = open_journal()
    feed = Feeder(journal)
    question = "Zebrafinch merger terms for Kestrel AG?"
    answer = "Kestrel AG agreed to the Zebrafinch terms on 2024-05-02."
    excerpt = "Zebrafinch board minutes: terms accepted"
    condition = "Zebrafinch-only scope"
    detail = "reading Zebrafinch minutes"
    title = "Kestrel board minutes (restricted)"
    privates = [question, answer, excerpt, condition, detail, title, "Zebrafinch", "Kestrel"]
    from imprint.contracts.runtime import EvidenceItem, EvidenceSet, RunCompleted

    feed(
        admitted("r1", question=question, qcs_set=qcs("q1", conditions=[Condition(name="scope", value=condition)])),
        *to_running("r1")[1:],
        RunStage(run_id="r1", stage="retrieval", detail=detail),
        RunCompleted(
            run_id="r1",
            outcome="answered",
            answer_text=answer,
            evidence=EvidenceSet(items=[EvidenceItem(source_id="src-z", title=title, excerpt=excerpt)], snapshot_id="s1", knowledge_version="k1"),
        ),
    )
    view = JournalQueries(journal).execution("r1", ACCOUNT, "completed")
    assert view.question == question and view.answer_text == answer  # readable before deletion
    before = sql_rows()
    assert all(p not in before for p in privates)  # sealed from the start: never plaintext at rest

    feed(delete_requested())
    journal.keyring.vacuum()
    rows = sql_rows()
    dump = _dump(journal_settings)
    assert dump is not None or shutil.which("pg_dump") is None
    for text in filter(None, [rows, dump]):
        assert "conv-1" in text and "src-z" in text and "esv1." in text  # the scan sees the journal's rows
        for private in privates:
            assert private not in text
    with psycopg.connect(journal_settings.database_url) as conn:
        key, destroyed_at = conn.execute(
            sql.SQL("SELECT data_key, destroyed_at FROM {} WHERE conversation_id = 'conv-1'").format(
                sql.Identifier(journal_settings.database_schema, "imprint_conversation_keys")
            )
        ).fetchone()
    assert key is None and destroyed_at is not None
    fresh = JournalQueries(open_journal())
    view = fresh.execution("r1", ACCOUNT, "completed")
    assert view.display == "deleted" and view.question is None and view.answer_text is None
    assert fresh.history("conv-1", ACCOUNT).deleted
    closed = [m for _, m in journal.announcements(limit=1000) if m is not None and m.type == "run.closed"]
    assert closed and all(m.answer_text is None for m in closed)


@pytest.mark.rule("X8")
def test_retention_sweep_leaves_no_private_string_in_any_table(open_journal, sql_rows) -> None:
    from datetime import timedelta

    journal = open_journal()
    feed = Feeder(journal)
    feed(*to_running("r1", conversation_id="c-old", question="Kittiwake retention probe?"), completed("r1", answer="Kittiwake answer"))
    now = journal.conversation("c-old").last_activity_at + timedelta(days=31)
    assert journal.sweep_retention(now, timedelta(days=30)) == ["c-old"]
    reread = open_journal().conversation("c-old")
    assert reread.deleted and reread.deletion_reason == "retention"
    assert "Kittiwake" not in sql_rows()


@pytest.mark.rule("X8")
@pytest.mark.backends("postgres", reason="its VACUUM; the contract on every backend is "
                                         "tests/integration/common/test_keyring_bulk.py")
def test_postgres_keyring_contract(journal_settings) -> None:
    from imprint.shredding import KeyDestroyed
    from services.common.backends import backend_for

    ring = backend_for(journal_settings).keyring()
    try:
        key = ring.key_for("c1", create=True)
        assert len(key) == 32 and ring.key_for("c1", create=True) == key == ring.key_for("c1")
        assert ring.key_for("c2") is None and not ring.is_destroyed("c2")
        ring.destroy("c1")
        ring.destroy("c1")
        assert ring.is_destroyed("c1") and ring.key_for("c1") is None
        with pytest.raises(KeyDestroyed):
            ring.key_for("c1", create=True)
        ring.destroy("never-keyed")
        with pytest.raises(KeyDestroyed):
            ring.key_for("never-keyed", create=True)
        ring.vacuum()
    finally:
        ring.close()

"""X7 — redaction by appended event; completion and redaction serialized."""

from __future__ import annotations

import pytest
from journal_helpers import ACCOUNT, EXCERPT, completed, granted, to_running, tombstoned

from imprint.journal.execution import AnswerExecution
from imprint.journal.redaction import SourceLinks, redact_items


@pytest.mark.rule("X7")
def test_tombstone_after_completion_hides_excerpts_keeps_identities(feed, journal, queries) -> None:
    feed(*to_running("r1"), completed("r1", sources=("src-a", "src-b")))
    before = journal.execution("r1").record
    feed(tombstoned("src-a"))
    ex = journal.execution("r1")
    assert ex.record == before  # the frozen record is not rewritten
    assert set(ex.redacted_sources) == {"src-a"}
    view = queries.execution("r1", ACCOUNT, "completed")
    assert [(e.source_id, e.title, e.redacted, e.excerpt) for e in view.evidence] == [
        ("src-a", "Title of src-a", True, None),
        ("src-b", "Title of src-b", False, f"{EXCERPT} [src-b]"),
    ]
    assert (view.snapshot_id, view.knowledge_version) == ("snap-7", "kv-2024.09")
    assert view.redacted_sources == ["src-a"]


@pytest.mark.rule("X7")
def test_redaction_is_an_appended_event(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1", sources=("src-a",)))
    feed(tombstoned("src-a"))
    events = list(journal.events.get(AnswerExecution.id_for("r1")))
    assert type(events[-1]).__name__ == "EvidenceRedacted" and events[-1].source_id == "src-a"


@pytest.mark.rule("X7")
def test_every_execution_citing_the_source_is_redacted(feed, journal) -> None:
    feed(*to_running("r1", message_id="m1"), completed("r1", sources=("src-a",)))
    feed(*to_running("r2", message_id="m2", conversation_id="conv-2"), completed("r2", sources=("src-a", "src-b")))
    feed(*to_running("r3", message_id="m3"), completed("r3", sources=("src-b",)))
    feed(tombstoned("src-a"))
    assert "src-a" in journal.execution("r1").redacted_sources
    assert "src-a" in journal.execution("r2").redacted_sources
    assert journal.execution("r3").redacted_sources == {}


@pytest.mark.rule("X7")
def test_source_tombstoned_while_generating_comes_out_redacted(feed, journal, queries) -> None:
    feed(*to_running("r1"), granted("r1", "src-a"))
    feed(tombstoned("src-a"))  # withdrawn during generation
    assert "src-a" in journal.execution("r1").redacted_sources  # the execution has seen it tombstoned
    feed(completed("r1", sources=("src-a", "src-b")))
    view = queries.execution("r1", ACCOUNT, "completed")
    assert [(e.source_id, e.redacted, e.excerpt is None) for e in view.evidence] == [("src-a", True, True), ("src-b", False, False)]
    closed = [m for _, m in journal.announcements() if m is not None and m.type == "run.closed"][0]
    assert [(e.source_id, e.redacted) for e in closed.evidence] == [("src-a", True), ("src-b", False)]


@pytest.mark.rule("X7")
def test_source_tombstoned_before_an_ungranted_completion_cites_it(feed, journal, queries) -> None:
    feed(tombstoned("src-x"))
    feed(*to_running("r1"), completed("r1", sources=("src-x",)))
    ex = journal.execution("r1")
    assert "src-x" in ex.redacted_sources
    names = [type(e).__name__ for e in journal.events.get(ex.id)]
    # redaction is recorded before the record closes, in the completion's own transaction
    assert names[-3:] == ["Transitioned", "EvidenceRedacted", "Closed"]


@pytest.mark.rule("X7")
def test_completion_links_sources_for_later_tombstones(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1", sources=("src-a",)))
    standing = journal.repository.get(SourceLinks.id_for("src-a"))
    assert standing.run_ids == ["r1"] and not standing.tombstoned


@pytest.mark.rule("X7")
def test_redelivered_or_repeated_tombstone_is_a_noop(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1", sources=("src-a",)))
    t = tombstoned("src-a")
    feed(t)
    version = journal.execution("r1").version
    feed(t)
    feed(tombstoned("src-a"))  # a second tombstone with another event_id
    assert journal.execution("r1").version == version


@pytest.mark.rule("X7")
def test_redact_items_keeps_order_and_titles() -> None:
    items = [("s1", "T1", "e1"), ("s2", "T2", "e2"), ("s1", "T1b", "e3")]
    out = redact_items(items, {"s1"})
    assert [(v.source_id, v.title, v.excerpt, v.redacted) for v in out] == [("s1", "T1", None, True), ("s2", "T2", "e2", False), ("s1", "T1b", None, True)]

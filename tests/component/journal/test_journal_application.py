"""The journal application: tracked batches (exactly-once effects), partitions, announcements."""

from __future__ import annotations

import pytest
from journal_helpers import ACCOUNT, admitted, completed, published, to_running, tombstoned

from imprint.contracts.runtime import ModelFrame, RunQueued
from imprint.contracts.topics import Topic
from imprint.journal import ids
from services.common.inbound import Inbound


@pytest.mark.rule("X2")
def test_overlapping_batch_applies_only_new_offsets(feed, journal) -> None:
    first = feed(*to_running("r1"))
    tail = feed.wrap(completed("r1"))
    journal.process([*first, *tail])
    ex = journal.execution("r1")
    assert ex.state.value == "completed" and ex.refusals == []
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") == 3


@pytest.mark.rule("X2")
def test_ignored_types_still_advance_the_tracking_position(feed, journal) -> None:
    feed(ModelFrame(run_id="r1", payload={"x": 1}))
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") == 0
    assert journal.execution("r1") is None


@pytest.mark.rule("X2")
def test_batch_over_several_partitions_tracks_each(journal) -> None:
    batch = [
        Inbound(str(Topic.RUNTIME), 0, 10, admitted("r1")),
        Inbound(str(Topic.RUNTIME), 1, 5, admitted("r2", message_id="m2")),
        Inbound(str(Topic.RUNTIME), 0, 11, RunQueued(run_id="r1")),
        Inbound(str(Topic.PUBLICATION), 3, 7, published("r2", "tool:c", "blk")),
        Inbound(str(Topic.SOURCES), 0, 2, tombstoned("src-x")),
    ]
    journal.process(batch)
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") == 11
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#1") == 5
    assert journal.recorder.max_tracking_id(f"{Topic.PUBLICATION}#3") == 7
    assert journal.recorder.max_tracking_id(f"{Topic.SOURCES}#0") == 2
    assert journal.execution("r1").state.value == "queued" and len(journal.execution("r2").effects) == 1


@pytest.mark.rule("X2")
def test_failure_in_one_partition_leaves_no_partial_state(journal, monkeypatch) -> None:
    ok = Inbound(str(Topic.RUNTIME), 0, 0, admitted("r1"))
    bad = [Inbound(str(Topic.RUNTIME), 1, 0, admitted("r2", message_id="m2")), Inbound(str(Topic.RUNTIME), 1, 1, RunQueued(run_id="r2"))]
    from imprint.journal.handling import HANDLERS

    def explode(ws, m, context):
        raise RuntimeError("crash while applying")

    monkeypatch.setitem(HANDLERS, RunQueued, explode)
    with pytest.raises(RuntimeError):
        journal.process([ok, *bad])
    # one poll, one transaction: nothing of it is committed, neither events nor positions
    assert journal.execution("r1") is None and journal.execution("r2") is None
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#0") is None
    assert journal.recorder.max_tracking_id(f"{Topic.RUNTIME}#1") is None
    monkeypatch.undo()
    journal.process([ok, *bad])  # redelivery
    assert journal.execution("r1").admitted and journal.execution("r2").state.value == "queued"


@pytest.mark.rule("X2")
def test_announcement_ids_are_deterministic(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1"))
    first = journal.announcements()
    again = journal.announcements()
    assert [m.event_id for _, m in first if m] == [m.event_id for _, m in again if m]
    ex = journal.execution("r1")
    closed = [m for _, m in first if m and m.type == "run.closed"][0]
    assert closed.event_id == ids.announcement_id(ex.id, ex.version)
    types = [m.type for _, m in first if m and not m.type.startswith("conversation.")]
    assert types == ["run.transitioned"] * 4 + ["run.closed"]
    assert [m.type for _, m in first if m and m.type.startswith("conversation.")] == [
        "conversation.question_started", "conversation.question_ended"], "X12: the conversation's queue"
    assert types.index("run.closed") > types.index("run.transitioned")


@pytest.mark.rule("X4")
def test_run_closed_carries_the_frozen_record(feed, journal) -> None:
    feed(*to_running("r1", message_id="m1"), completed("r1", sources=("src-a",)))
    closed = [m for _, m in journal.announcements() if m and m.type == "run.closed"][0]
    assert (closed.account_id, closed.conversation_id, closed.message_id, closed.state, closed.outcome) == (ACCOUNT, "conv-1", "m1", "completed", "answered")
    assert closed.answer_text and [e.source_id for e in closed.evidence] == ["src-a"]
    assert (closed.snapshot_id, closed.knowledge_version) == ("snap-7", "kv-2024.09")


@pytest.mark.rule("X2")
def test_announcements_page_through_the_log(feed, journal) -> None:
    feed(*to_running("r1"))
    page = journal.announcements(after=0, limit=2)
    rest = journal.announcements(after=page[-1][0], limit=100)
    positions = [p for p, _ in page + rest]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)

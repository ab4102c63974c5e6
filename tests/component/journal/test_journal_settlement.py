"""P19 two settlement points (tool receipt vs publication effect); P20 later failure keeps earlier commits."""

from __future__ import annotations

import pytest
from journal_helpers import ACCOUNT, admitted, completed, published, to_running, unchanged

from imprint.contracts.runtime import RunFailed, RunStopped, ToolReceipt
from imprint.journal.lifecycle import State


@pytest.mark.rule("P19")
def test_effect_and_receipt_are_separate_facts(feed, journal) -> None:
    feed(*to_running("r1"))
    feed(published("r1", "tool:call-1", "blk-1"))
    ex = journal.execution("r1")
    assert [e.block_id for e in ex.effects_for("tool:call-1")] == ["blk-1"]
    assert ex.receipts_for("call-1") == []  # an effect never implies a receipt
    feed(ToolReceipt(run_id="r1", tool_call_id="call-1", status="failed"))
    ex = journal.execution("r1")
    assert [r.status for r in ex.receipts_for("call-1")] == ["failed"]
    assert len(ex.effects) == 1  # a failed receipt never erases the effect


@pytest.mark.rule("P19")
def test_receipt_without_effect_stays_without_effect(feed, journal) -> None:
    feed(*to_running("r1"), ToolReceipt(run_id="r1", tool_call_id="call-2", status="ok"))
    ex = journal.execution("r1")
    assert [r.status for r in ex.receipts] == ["ok"] and ex.effects == []


@pytest.mark.rule("P19")
def test_unknown_receipt_stays_unknown(feed, journal, queries) -> None:
    feed(*to_running("r1"), published("r1", "tool:call-3", "blk-3"), ToolReceipt(run_id="r1", tool_call_id="call-3", status="unknown"))
    view = queries.execution("r1", ACCOUNT)
    assert [(r.tool_call_id, r.status) for r in view.receipts] == [("call-3", "unknown")]
    assert [(e.kind, e.block_id, e.receipt_id) for e in view.effects] == [("published", "blk-3", "rcpt-blk-3-1")]


@pytest.mark.rule("P19")
def test_unchanged_effect_is_recorded_per_block_with_the_reused_receipt(feed, journal) -> None:
    feed(*to_running("r1"), published("r1", "tool:call-1", "blk-1"), unchanged("r1", "tool:call-9", "blk-1"))
    ex = journal.execution("r1")
    assert [(e.kind, e.candidate_id, e.receipt_id) for e in ex.effects] == [
        ("published", "tool:call-1", "rcpt-blk-1-1"),
        ("unchanged", "tool:call-9", "rcpt-blk-1-1"),
    ]


@pytest.mark.rule("P19")
def test_effect_seen_before_admission_is_recorded_not_refused(feed, journal) -> None:
    feed(published("r1", "tool:call-1", "blk-1"))  # publication topic ahead of the runtime topic
    ex = journal.execution("r1")
    assert len(ex.effects) == 1 and ex.refusals == [] and not ex.admitted
    feed(*to_running("r1"))
    ex = journal.execution("r1")
    assert ex.state is State.RUNNING and len(ex.effects) == 1


@pytest.mark.rule("P19")
def test_redelivered_effect_and_receipt_are_noops(feed, journal) -> None:
    effect, receipt = published("r1", "tool:call-1", "blk-1"), ToolReceipt(run_id="r1", tool_call_id="call-1", status="ok")
    feed(*to_running("r1"), effect, receipt)
    feed(effect, receipt)
    ex = journal.execution("r1")
    assert len(ex.effects) == 1 and len(ex.receipts) == 1


@pytest.mark.rule("P19")
def test_receipt_may_settle_after_the_run_ended(feed, journal) -> None:
    feed(*to_running("r1"), completed("r1"), ToolReceipt(run_id="r1", tool_call_id="call-1", status="ok"))
    ex = journal.execution("r1")
    assert [r.status for r in ex.receipts] == ["ok"] and ex.refusals == []


@pytest.mark.rule("P20")
@pytest.mark.parametrize("ending", [RunFailed(run_id="r1", reason="upstream 500"), RunStopped(run_id="r1")], ids=["failed", "stopped"])
def test_failure_after_committed_blocks_keeps_both_facts(feed, journal, queries, ending) -> None:
    feed(*to_running("r1"), published("r1", "tool:call-1", "blk-1"), published("r1", "text:t1:0", "blk-2"))
    feed(ending)
    ex = journal.execution("r1")
    assert ex.state in (State.FAILED, State.STOPPED)
    assert [e.block_id for e in ex.effects] == ["blk-1", "blk-2"]
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.outcome is None and view.display in ("failed", "stopped") and not view.complete  # blocks never claim success
    assert [e.block_id for e in view.effects] == ["blk-1", "blk-2"]


@pytest.mark.rule("P20")
def test_effect_after_failure_is_still_recorded(feed, journal) -> None:
    feed(*to_running("r1"), RunFailed(run_id="r1", reason="x"), published("r1", "tool:call-1", "blk-1"))
    ex = journal.execution("r1")
    assert ex.state is State.FAILED and len(ex.effects) == 1 and ex.refusals == []


@pytest.mark.rule("P20")
def test_failed_run_is_announced_closed_without_an_answer(feed, journal) -> None:
    feed(admitted("r1"), RunFailed(run_id="r1", reason="boom"))
    closed = [m for _, m in journal.announcements() if m is not None and m.type == "run.closed"]
    assert len(closed) == 1 and closed[0].state == "failed" and closed[0].outcome is None and closed[0].answer_text is None
    transitioned = [m for _, m in journal.announcements() if m is not None and m.type == "run.transitioned"]
    assert [(m.state, m.reason) for m in transitioned] == [("admitted", None), ("failed", "boom")]

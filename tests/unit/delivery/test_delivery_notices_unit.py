"""D7's pure rules: when a withdrawal becomes a notice and what a notice carries
(:mod:`imprint.delivery.notices`), its AI SDK part, and the "who saw it" fold
(:mod:`imprint.delivery.seen`)."""

from __future__ import annotations

import json

import pytest

from imprint.delivery.frames import RunProjection
from imprint.delivery.handling import step
from imprint.delivery.notices import Notice, client_cause
from imprint.delivery.seen import Position, Render, Withdrawal, report
from imprint.delivery.ui_message_stream import message_id, notice_part
from tests.support.delivery_builders import closed, preview, published, rejected, running, settled, withdrawn

RUN = "run-n"


def ended(*blocks: object, conversation: str | None = "conv-n") -> RunProjection:
    p = RunProjection.new(RUN)
    opening = [running(RUN, conversation=conversation)] if conversation else []
    for message in (*opening, *blocks, settled(RUN), closed(RUN, "x", conversation=conversation or "conv-x")):
        step(p, message)
    assert p.terminal
    return p


@pytest.mark.rule("D7")
@pytest.mark.rule("D6")
def test_a_withdrawal_after_done_becomes_a_notice_of_the_shown_revision_without_the_source() -> None:
    p = ended(published(RUN, "b1", 1, "v1"), published(RUN, "b1", 2, "v2"), published(RUN, "b2", 1, "other"))
    result = step(p, withdrawn(RUN, "b1", 2, "source_revoked", source_id="src-private-3"))
    assert result.drafts == [], "nothing follows done (D3)"
    assert result.notices == [Notice(run_id=RUN, conversation_id="conv-n", block_id="b1", revision=2,
                                     cause="source_revoked")]
    payload = result.notices[0].payload(7, "2026-01-01T00:00:00+00:00")
    assert payload == {"notice_id": 7, "kind": "withdrawn", "run_id": RUN, "block_id": "b1", "revision": 2,
                       "cause": "source_revoked", "at": "2026-01-01T00:00:00+00:00"}
    assert "src-private-3" not in json.dumps(payload)


@pytest.mark.rule("D7")
def test_no_notice_for_a_block_nobody_was_shown_before_done_or_without_a_conversation() -> None:
    p = RunProjection.new(RUN)
    for message in (running(RUN, conversation="conv-n"), published(RUN, "b1", 1, "v1"), withdrawn(RUN, "b1")):
        assert step(p, message).notices == [], "before done the run's own stream carries the withdrawal"
    for message in (settled(RUN), closed(RUN, "x", conversation="conv-n")):
        step(p, message)
    assert step(p, withdrawn(RUN, "b1", 1, "source_tombstoned")).notices == [], "already hidden: nothing to tell"
    assert step(p, withdrawn(RUN, "b-never", 1)).notices == [], "never shown"
    orphan = ended(published(RUN, "b1", 1, "v1"), conversation=None)
    orphan.conversation_id = None
    assert step(orphan, withdrawn(RUN, "b1")).notices == [], "no conversation: no stream to carry it"


@pytest.mark.rule("D7")
@pytest.mark.rule("D6")
def test_a_source_rejection_after_done_reads_as_its_client_safe_cause() -> None:
    p = ended(preview(RUN, "b1", 1, "shown as a preview"), published(RUN, "b1", 1, "shown as a preview"))
    [notice] = step(p, rejected(RUN, "tool:c9", block_id="b1")).notices
    assert notice.cause == "source_rejected"
    assert client_cause("unauthorized_source") == "withdrawn" and client_cause(None) == "withdrawn"


@pytest.mark.rule("D7")
def test_a_notice_as_an_ai_sdk_part_replaces_the_block_part_of_the_runs_message() -> None:
    part = notice_part(Notice(RUN, "conv-n", "b1", 2, "source_revoked").payload(3, "t"))
    assert part == {"type": "data-block", "id": "b1", "data": {
        "block_id": "b1", "state": "withdrawn", "revision": 2, "cause": "source_revoked", "run_id": RUN,
        "message_id": message_id(RUN), "notice_id": 3}}
    assert set(part) == {"type", "id", "data"}, "the SDK's strict data part: no other top-level key"


@pytest.mark.rule("D7")
@pytest.mark.rule("D4")
def test_the_report_lists_who_rendered_each_withdrawn_revision_and_whether_each_was_told() -> None:
    withdrawals = [Withdrawal(RUN, "b1", 2, "source_revoked", "t5", notice_id=4),
                   Withdrawal(RUN, "b2", 1, "source_tombstoned", "t3", frame_id=9)]
    renders = [Render("b1", 1, "page-a", "t1"), Render("b1", 2, "page-b", "t2"), Render("b1", 3, "page-c", "t6"),
               Render("b1", None, None, "t2"), Render("b2", 1, "page-a", "t1"), Render("b2", 1, "page-b", "t1")]
    positions = [Position("page-a", 9, "t4"), Position("page-b", 8, "t4")]
    out = report(RUN, withdrawals, renders, positions, {(4, "page-b"): "t7"})
    assert [w["block_id"] for w in out["withdrawals"]] == ["b2", "b1"], "in the order they were told"
    b2, b1 = out["withdrawals"]
    assert b2["told"] == {"via": "stream", "frame_id": 9}
    assert [(s["client_id"], s["received_withdrawal"], s["received_at"]) for s in b2["seen_by"]] == [
        ("page-a", True, "t4"), ("page-b", False, None)], "received means: its receipt covers the frame"
    assert b1["told"] == {"via": "notice", "notice_id": 4}
    assert [(s["client_id"], s["revision"], s["rendered_at"], s["received_withdrawal"]) for s in b1["seen_by"]] == [
        ("page-a", 1, "t1", False), (None, None, "t2", None), ("page-b", 2, "t2", True)]
    assert "page-c" not in json.dumps(b1), "a newer revision than the withdrawn one is another claim"
    assert (out["clients"], out["outstanding"], out["unknown"], b1["outstanding"], b2["outstanding"]) == (
        2, 2, 1, 1, 1)
    assert report(RUN, [], renders, positions, {}) == {"run_id": RUN, "withdrawals": [], "clients": 0,
                                                       "outstanding": 0, "unknown": 0}

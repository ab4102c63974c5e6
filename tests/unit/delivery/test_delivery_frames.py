"""D2 frames from inbound messages, D3 summary and terminal validation, D5 presentation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imprint.contracts.runs import RunTransitioned
from imprint.delivery.execution import presentation
from imprint.delivery.frame import FrameDraft, skeleton_text
from imprint.delivery.frames import (
    CONTENT_CHUNK,
    FRAME_KINDS,
    chunk_text,
    skeleton,
)
from imprint.delivery.handling import step
from imprint.delivery.summary import DONE_DATA, digest, summarize, validate_stream
from tests.support.delivery_builders import (
    Run,
    closed,
    deleted,
    preview,
    progress,
    published,
    rejected,
    running,
    save_failed,
    settled,
    withdrawn,
)

RUN = "run-f"


@pytest.mark.rule("D2")
def test_the_frame_vocabulary() -> None:
    assert set(FRAME_KINDS) >= {"progress", "answer-preview", "answer-publication", "answer-withdrawn",
                                "answer-rejected", "run-status", "content", "evidence-summary", "stream-summary",
                                "done"}


@pytest.mark.rule("D2")
def test_a_closed_answer_streams_content_in_chunks_of_at_most_28_characters_then_evidence_then_the_terminal() -> None:
    run = Run()
    text = "Water boils at 100 °C at sea level; 沸点随海拔降低。" * 3
    run.feed(running(RUN), published(RUN, "b1", 1, "block"))
    assert "content" not in run.events()
    run.feed(settled(RUN), closed(RUN, text))
    events = run.events()
    contents = [d for _, e, d in run.frames if e == "content"]
    assert contents and all(len(d["text"]) <= CONTENT_CHUNK for d in contents)  # type: ignore[index]
    assert "".join(d["text"] for d in contents) == text  # type: ignore[index]
    first_content = events.index("content")
    assert events[first_content - 1] == "run-status"
    assert events[-3:] == ["evidence-summary", "stream-summary", "done"]
    assert run.frames[-1][2] == DONE_DATA and events.count("done") == 1
    assert validate_stream(run.frames).ok


@pytest.mark.rule("D2")
def test_content_never_precedes_the_closed_record_even_if_the_run_transitioned_to_completed() -> None:
    run = Run()
    from imprint.contracts.runs import RunTransitioned

    run.feed(RunTransitioned(run_id=RUN, account_id="a", conversation_id="c", state="completed", sequence=4))
    assert run.events() == ["run-status"]
    assert "done" not in run.events()


@pytest.mark.rule("D2")
@pytest.mark.rule("D3")
def test_nothing_is_appended_after_done_and_a_second_close_is_ignored() -> None:
    run = Run()
    run.feed(running(RUN), published(RUN, "b1", 1, "v1"), settled(RUN), closed(RUN, "x"))
    before = list(run.frames)
    assert run.feed(closed(RUN, "again"), published(RUN, "b2", 1, "late"),
                    progress(RUN, "late"), running(RUN, sequence=9)) == []
    assert run.frames == before


@pytest.mark.rule("P21")
@pytest.mark.rule("D3")
def test_a_withdrawal_after_done_strips_the_blocks_frames_instead_of_appending() -> None:
    run = Run()
    run.feed(published(RUN, "b1", 1, "v1"), settled(RUN), closed(RUN, "x"))
    result = step(run.projection, withdrawn(RUN, "b1", 1, "source_tombstoned"))
    assert result.drafts == [] and result.hidden_after_terminal == ["b1"]


@pytest.mark.rule("D2")
@pytest.mark.rule("D6")
def test_withdrawn_and_rejected_frames_are_client_safe() -> None:
    run = Run()
    drafts = run.feed(
        running(RUN), published(RUN, "b1", 1, "v1"),
        withdrawn(RUN, "b1", 1, "source_revoked", source_id="src-private-9"),
        rejected(RUN, "tool:c2"),
    )
    withdrawal = next(d for d in drafts if d.event == "answer-withdrawn")
    rejection = next(d for d in drafts if d.event == "answer-rejected")
    assert withdrawal.data["block"] is None and withdrawal.data["cause"] == "source_revoked"
    assert rejection.data["reason"] == "not_publishable"
    blob = json.dumps([d.data for d in drafts])
    assert "src-private-9" not in blob and "unauthorized_source" not in blob


@pytest.mark.rule("D2")
@pytest.mark.rule("P14")
def test_block_frames_carry_the_resulting_display_state() -> None:
    run = Run()
    drafts = run.feed(published(RUN, "b1", 1, "v1"), preview(RUN, "b1", 2, "v2", candidate="c2"),
                      save_failed(RUN, "c2", ["b1"]))
    assert [d.event for d in drafts] == ["answer-publication", "answer-preview", "answer-preview"]
    assert drafts[0].data["block"]["status"] == "saved"
    assert drafts[1].data["block"]["status"] == "unsaved" and drafts[1].data["block"]["revision"] == 2
    assert drafts[2].data["status"] == "save_failed"
    assert drafts[2].data["block"]["revision"] == 1 and drafts[2].data["block"]["status"] == "saved"
    assert {d.key for d in drafts} == {"block:b1"}
    assert drafts[0].body_sha256 == drafts[0].data["block"]["body_sha256"]


@pytest.mark.rule("P17")
@pytest.mark.rule("D2")
def test_a_protocol_conflict_appends_an_error_frame() -> None:
    run = Run()
    drafts = run.feed(published(RUN, "b1", 1, "A"), published(RUN, "b1", 1, "B"))
    assert [d.event for d in drafts] == ["answer-publication", "answer-publication", "error"]
    assert drafts[2].data["code"] == "protocol_conflict" and drafts[2].data["revision"] == 1
    assert drafts[1].data["block"]["status"] == "conflict"


@pytest.mark.rule("D2")
def test_progress_and_status_frames_supersede_their_predecessors() -> None:
    run = Run()
    drafts = run.feed(running(RUN), progress(RUN, "retrieval", "3 hits"))
    assert [(d.event, d.key) for d in drafts] == [("run-status", "run-status"), ("progress", "progress")]
    assert drafts[1].data["stage"] == "retrieval"


@pytest.mark.rule("D6")
def test_a_message_naming_another_account_does_not_rebind_the_run() -> None:
    run = Run()
    run.feed(running(RUN, account="acct-1"))
    assert run.feed(running(RUN, account="acct-2", sequence=9)) == []
    assert run.projection.account_id == "acct-1"
    result = step(run.projection, deleted(RUN, "conv-x", account="acct-2"))
    assert result.purge_conversation is None


@pytest.mark.rule("X6")
@pytest.mark.rule("D2")
def test_generation_unavailable_gets_no_evidence_summary() -> None:
    run = Run()
    run.feed(settled(RUN), closed(RUN, None, outcome="generation_unavailable"))
    assert "evidence-summary" not in run.events() and "content" not in run.events()
    assert run.events()[-2:] == ["stream-summary", "done"]


@pytest.mark.rule("D2")
@given(st.text(max_size=300))
def test_chunking_loses_nothing_and_respects_the_bound(text: str) -> None:
    chunks = chunk_text(text)
    assert "".join(chunks) == text
    assert all(0 < len(c) <= 28 for c in chunks)


# ---------------------------------------------------------------------- D3


def good_stream() -> list[tuple[int, str, object]]:
    run = Run()
    run.feed(running(RUN), published(RUN, "b1", 1, "v1"), settled(RUN), closed(RUN, "x" * 40))
    return run.frames


@pytest.mark.rule("D3")
def test_a_complete_stream_validates() -> None:
    frames = good_stream()
    assert validate_stream(frames).ok
    summary = frames[-2][2]
    assert summary == summarize([(i, d["body_sha256"]) for i, e, d in frames[:-2]])  # type: ignore[index]


@pytest.mark.rule("D3")
@pytest.mark.parametrize(("mutate", "problem"), [
    (lambda f: f[:-1], "missing_terminal"),
    (lambda f: f + [(len(f) + 1, "done", DONE_DATA)], "duplicate_terminal"),
    (lambda f: f[:-1] + [(f[-1][0], "done", "[done]")], "contradictory_terminal"),
    (lambda f: f + [(len(f) + 1, "progress", {"stage": "late", "body_sha256": "x"})], "frame_after_terminal"),
    (lambda f: [x for x in f if x[0] != 2], "id_gap"),
    (lambda f: f[:1] + f, "duplicate_id"),
    (lambda f: [(i, e, ({**d, "body_sha256": "forged"} if i == 2 else d)) for i, e, d in f], "summary_mismatch"),
    (lambda f: [x for x in f if x[1] != "stream-summary"], "missing_summary"),
])
def test_broken_terminals_break_the_completion_projection(mutate, problem) -> None:  # type: ignore[no-untyped-def]
    check = validate_stream(mutate(good_stream()))
    assert not check.ok and problem in check.problems


@pytest.mark.rule("D3")
def test_an_unfinished_stream_is_fine_when_not_required_complete() -> None:
    frames = good_stream()[:3]
    assert validate_stream(frames, complete=False).ok
    assert not validate_stream(frames).ok


@pytest.mark.rule("D3")
def test_skeletons_keep_the_hash_so_the_digest_still_checks() -> None:
    frames = good_stream()
    stripped = [(i, e, skeleton(e, d, d["body_sha256"]) if isinstance(d, dict) and "body_sha256" in d else d)
                for i, e, d in frames]
    assert validate_stream(stripped).ok
    assert "v1" not in json.dumps([d for _, _, d in stripped])


@pytest.mark.rule("D3")
def test_a_draft_carries_its_stored_text_and_the_skeleton_it_becomes() -> None:
    """A frame superseded within its poll is written as its draft's skeleton; one superseded
    later is stripped from its stored text: both give the same skeleton, hash kept."""
    for _, event, data in good_stream():
        if not isinstance(data, dict) or "body_sha256" not in data:
            continue
        keyed = FrameDraft(event, data, data["body_sha256"], key=f"block:{data.get('block_id')}")
        assert json.loads(keyed.text) == data
        assert keyed.superseded == skeleton_text(event, keyed.text, data["body_sha256"])
        assert json.loads(keyed.superseded)["body_sha256"] == data["body_sha256"]
        assert FrameDraft(event, data, data["body_sha256"]).superseded is None


@pytest.mark.rule("D3")
def test_digest_depends_on_ids_and_hashes_only() -> None:
    assert digest([(1, "a"), (2, "b")]) == digest([(2, "b"), (1, "a")])
    assert digest([(1, "a"), (2, "b")]) != digest([(1, "b"), (2, "a")])


# ---------------------------------------------------------------------- D5


@pytest.mark.rule("D5")
@pytest.mark.parametrize(("delivery", "display"), [("pending", "delivery_pending"),
                                                   ("interrupted", "delivery_interrupted"),
                                                   ("completed", "complete")])
def test_a_completed_execution_is_complete_only_once_delivered_and_its_outcome_is_never_rewritten(
    delivery: str, display: str,
) -> None:
    shown = presentation(state="completed", outcome="answered", delivery=delivery, closed=True)
    assert shown["display"] == display
    assert shown["complete"] is (delivery == "completed")
    assert shown["outcome"] == "answered", "never rewritten as insufficient evidence"


@pytest.mark.rule("D5")
def test_presentation_of_other_states() -> None:
    assert presentation(state="running", outcome=None, delivery="pending", closed=False)["display"] == "in_progress"
    assert presentation(state="completed", outcome="answered", delivery="completed", closed=False)["complete"] is False
    stopped = presentation(state="stopped", outcome=None, delivery="completed", closed=True)
    assert stopped["display"] == "stopped" and stopped["complete"] is False


@pytest.mark.rule("D3")
@pytest.mark.rule("D4")
def test_done_waits_for_publication_to_settle_so_it_never_overtakes_a_committed_block() -> None:
    """The journal's closed record and Publication's relay race on two topics: a block
    committed before the run ended may arrive after ``run.closed``. ``done`` waits for
    ``answer.settled``, which the log orders after every such block."""
    run = Run()
    run.feed(running(RUN), closed(RUN, "The answer."))
    assert [event for _, event, _ in run.frames] == ["run-status", "run-status"], "no content, no done yet"
    run.feed(published(RUN, "b1", 1, "Committed before the end, relayed after the close."))
    run.feed(settled(RUN))
    events = [event for _, event, _ in run.frames]
    assert events.index("answer-publication") < events.index("content") < events.index("done")
    assert events[-2:] == ["stream-summary", "done"] and events.count("done") == 1


@pytest.mark.rule("D3")
def test_settlement_before_the_closed_record_also_ends_the_stream_once() -> None:
    run = Run()
    run.feed(running(RUN), published(RUN, "b1", 1, "v1"), settled(RUN))
    assert "done" not in [event for _, event, _ in run.frames], "the closed execution is not persisted yet"
    run.feed(closed(RUN, "x"), settled(RUN))
    assert [event for _, event, _ in run.frames].count("done") == 1


@pytest.mark.rule("X10")
@pytest.mark.rule("D5")
@pytest.mark.rule("P20")
def test_a_run_closed_for_runtime_lost_ends_with_its_committed_blocks_and_the_reason_and_nothing_invented() -> None:
    """The Journal closed the run (its lease lapsed) and Publication ended it from the
    lapse: the stream ends like any failed run — the committed block stays, the status
    says why, no content or evidence is made up, and the run is not shown as complete."""
    run = Run()
    run.feed(running(RUN), published(RUN, "b1", 1, "Committed before the runtime was lost."))
    lost = RunTransitioned(run_id=RUN, account_id="acct-1", conversation_id=f"conv-{RUN}", state="failed",
                           previous="running", sequence=4, reason="runtime_lost")
    run.feed(lost, closed(RUN, None, state="failed"))
    assert "done" not in run.events(), "done waits for Publication's answer.settled"
    run.feed(settled(RUN, "failed"))
    assert run.events() == ["run-status", "answer-publication", "run-status", "run-status", "stream-summary", "done"]
    statuses = [data for _, event, data in run.frames if event == "run-status"]
    assert statuses[-1]["state"] == "failed" and statuses[-1]["reason"] == "runtime_lost"
    shown = [data["block"] for _, event, data in run.frames if event == "answer-publication"]
    assert shown[0]["block_id"] == "b1" and shown[0]["saved"] is True
    assert validate_stream(run.frames).ok
    presented = presentation(state="failed", outcome=None, delivery="completed", closed=True)
    assert presented["display"] == "failed" and presented["complete"] is False and presented["outcome"] is None

"""The per-run answer view: P16 merge priority, P17 conflicts, P18 position, P21
withdrawal, save outcomes, D6 client-safe reasons."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imprint.delivery import merge
from imprint.delivery.handling import apply, named_blocks
from imprint.delivery.merge import AnswerState, client_reason, display, view
from tests.support.delivery_builders import (
    preview,
    published,
    rejected,
    revision_rejected,
    save_failed,
    save_unknown,
    unchanged,
    withdrawn,
)

RUN = "run-m"


def fold(*messages: object) -> AnswerState:
    state = AnswerState(run_id=RUN)
    for message in messages:
        apply(state, message)
    return state


def shown(state: AnswerState, block_id: str) -> dict | None:
    return display(state.blocks[block_id]) if block_id in state.blocks else None


@pytest.mark.rule("P16")
def test_a_newer_preview_beats_an_older_committed_revision_for_display_only_and_is_marked_unsaved() -> None:
    state = fold(published(RUN, "b1", 1, "committed v1"), preview(RUN, "b1", 2, "preview v2", candidate="c2"))
    entry = shown(state, "b1")
    assert entry is not None
    assert entry["revision"] == 2 and entry["content"]["markdown"] == "preview v2"
    assert entry["status"] == "unsaved" and entry["saved"] is False and entry["receipt"] is None
    # the committed revision is still what is durable
    assert state.blocks["b1"].top_committed() == 1


@pytest.mark.rule("P16")
def test_for_the_same_revision_the_committed_receipt_beats_preview_metadata_in_either_order() -> None:
    pre = preview(RUN, "b1", 1, "same body", source_hint="sources_verified", candidate="c1")
    pub = published(RUN, "b1", 1, "same body", source_hint="sources_partial", candidate="c1")
    for order in ((pre, pub), (pub, pre)):
        entry = shown(fold(*order), "b1")
        assert entry is not None
        assert entry["status"] == "saved" and entry["saved"] is True
        assert entry["source_hint"] == "sources_partial", "a preview never repaints the committed hint"
        assert entry["receipt"] is not None


@pytest.mark.rule("P16")
def test_an_older_preview_after_a_newer_commit_is_ignored() -> None:
    state = fold(published(RUN, "b1", 2, "v2"), preview(RUN, "b1", 1, "stale v1"))
    entry = shown(state, "b1")
    assert entry is not None and entry["revision"] == 2 and entry["status"] == "saved"


@pytest.mark.rule("P16")
@pytest.mark.rule("P21")
def test_a_withdrawal_beats_any_earlier_preview_and_receipt_and_a_late_receipt_does_not_resurrect() -> None:
    state = fold(
        published(RUN, "b1", 1, "v1"),
        preview(RUN, "b1", 2, "v2 preview", candidate="c2"),
        withdrawn(RUN, "b1", 1, "source_revoked", source_id="src-private"),
    )
    assert shown(state, "b1") is None
    assert state.blocks["b1"].committed == {}, "withdrawn bodies leave the view"
    apply(state, published(RUN, "b1", 2, "v2 preview", candidate="c2"))  # a receipt already in flight
    assert shown(state, "b1") is None
    apply(state, published(RUN, "b1", 3, "v3 after revocation", candidate="c3"))
    entry = shown(state, "b1")
    assert entry is not None and entry["revision"] == 3, "only a newer revision shows the block again"


def saved_then_revision_rejected(reason: str, markdown: str = "v2") -> AnswerState:
    """Block b1 saved at revision 1, its revision 2 previewed, then the revision rejected for ``reason``."""
    return fold(
        published(RUN, "b1", 1, "v1"),
        preview(RUN, "b1", 2, markdown, candidate="c2"),
        rejected(RUN, "c2", block_id="b1", reason=reason),
    )


@pytest.mark.rule("P16")
def test_a_current_source_rejection_beats_the_old_preview_and_receipt_of_that_block() -> None:
    state = saved_then_revision_rejected("unauthorized_source", "v2 citing a private report")
    assert shown(state, "b1") is None
    assert view(state) == []


@pytest.mark.rule("P16")
def test_a_non_source_rejection_drops_only_the_candidates_preview() -> None:
    state = saved_then_revision_rejected("malformed_block")
    entry = shown(state, "b1")
    assert entry is not None and entry["revision"] == 1 and entry["status"] == "saved"
    apply(state, preview(RUN, "b1", 2, "v2", candidate="c2"))  # a late duplicate of the refused preview
    assert shown(state, "b1")["revision"] == 1  # type: ignore[index]


@pytest.mark.rule("P17")
def test_preview_and_published_of_one_revision_with_different_bodies_is_a_conflict_not_last_writer_wins() -> None:
    state = AnswerState(run_id=RUN)
    apply(state, preview(RUN, "b1", 1, "body A", candidate="c1"))
    result = apply(state, published(RUN, "b1", 1, "body B", candidate="c1"))
    assert len(result.conflicts) == 1
    conflict = result.conflicts[0]
    assert (conflict.block_id, conflict.revision, conflict.first_kind, conflict.second_kind) == \
        ("b1", 1, "preview", "published")
    assert conflict.first_sha256 != conflict.second_sha256
    entry = shown(state, "b1")
    assert entry is not None and entry["status"] == "conflict" and entry["content"] is None, \
        "neither body is shown for the conflicting revision"
    assert state.conflicts == [conflict]


@pytest.mark.rule("P17")
def test_published_vs_published_conflict_keeps_the_older_committed_revision_visible_with_a_mark() -> None:
    state = fold(published(RUN, "b1", 1, "v1"), published(RUN, "b1", 2, "v2 A", candidate="c2"))
    result = apply(state, published(RUN, "b1", 2, "v2 B", candidate="c3"))
    assert [c.second_kind for c in result.conflicts] == ["published"]
    entry = shown(state, "b1")
    assert entry is not None
    assert entry["revision"] == 1 and entry["status"] == "saved"
    assert entry["conflict"] == {"revision": 2}
    # the same body again is no conflict (a duplicate, not a contradiction)
    assert apply(state, published(RUN, "b1", 1, "v1")).conflicts == []


@pytest.mark.rule("P17")
def test_two_pending_previews_of_one_revision_with_different_bodies_conflict() -> None:
    state = fold(preview(RUN, "b1", 1, "A", candidate="c1"))
    assert apply(state, preview(RUN, "b1", 1, "B", candidate="c2")).conflicts


@pytest.mark.rule("P18")
def test_revisions_replace_the_block_in_place_and_keep_the_first_commits_ordinal() -> None:
    state = fold(
        published(RUN, "b1", 1, "first", ordinal=1),
        published(RUN, "b2", 1, "second", ordinal=2),
        published(RUN, "b1", 2, "first, revised", ordinal=7),  # a revision cannot move the block
    )
    entries = view(state)
    assert [(e["block_id"], e["revision"], e["delivery_ordinal"]) for e in entries] == [("b1", 2, 1), ("b2", 1, 2)]
    assert len(entries) == 2, "a revision never shows as a second block"


@pytest.mark.rule("P18")
def test_view_orders_blocks_by_ordinal_not_arrival() -> None:
    state = fold(published(RUN, "b3", 1, "c", ordinal=3), published(RUN, "b1", 1, "a", ordinal=1),
                 preview(RUN, "b2", 1, "b", ordinal=2))
    assert [e["block_id"] for e in view(state)] == ["b1", "b2", "b3"]


@pytest.mark.rule("P14")
@pytest.mark.rule("P16")
def test_a_failed_save_stops_showing_the_preview_as_pending_and_never_as_saved() -> None:
    state = fold(published(RUN, "b1", 1, "v1"), preview(RUN, "b1", 2, "v2", candidate="c2"),
                 preview(RUN, "b2", 1, "new block", ordinal=2, candidate="c2"))
    apply(state, save_unknown(RUN, "c2", ["b1", "b2"]))
    assert shown(state, "b1")["status"] == "save_unknown"  # type: ignore[index]
    apply(state, save_failed(RUN, "c2", ["b1", "b2"], error="db down"))
    b1 = shown(state, "b1")
    assert b1 is not None and b1["revision"] == 1 and b1["status"] == "saved", "falls back to the committed revision"
    assert shown(state, "b2") is None, "nothing was ever committed for b2"
    # a failed preview is no fact to conflict with: a later commit of revision 2 is fine
    assert apply(state, published(RUN, "b1", 2, "v2 retried differently", candidate="c9")).conflicts == []


@pytest.mark.rule("P11")
def test_unchanged_settles_the_preview_onto_the_original_receipt() -> None:
    state = fold(published(RUN, "b1", 1, "v1"), preview(RUN, "b1", 2, "v1", candidate="c2"))
    apply(state, unchanged(RUN, "c2", "b1", 1))
    entry = shown(state, "b1")
    assert entry is not None and entry["revision"] == 1 and entry["status"] == "saved"


@pytest.mark.rule("P12")
@pytest.mark.rule("P13")
def test_a_rejected_revision_keeps_the_committed_body_and_names_only_blocks_of_this_run() -> None:
    state = fold(published(RUN, "b1", 1, "v1"), preview(RUN, "b1", 2, "over quota", candidate="c2"))
    result = apply(state, revision_rejected(RUN, "c2", "b1", reason="quota_exceeded"))
    assert result.rejection is not None and result.rejection.block_id == "b1"
    assert shown(state, "b1")["revision"] == 1  # type: ignore[index]
    foreign = apply(state, revision_rejected(RUN, "c3", "blk-of-another-run", reason="invalid_target"))
    assert foreign.rejection is not None and foreign.rejection.block_id is None
    assert "blk-of-another-run" not in state.blocks


@pytest.mark.rule("D6")
def test_rejection_reasons_reaching_a_client_never_reveal_a_private_source() -> None:
    assert client_reason("unauthorized_source") == "not_publishable"
    assert client_reason("something new with src-secret-123") == "not_publishable"
    assert client_reason("empty_body") == "empty_body"
    result = apply(AnswerState(run_id=RUN), rejected(RUN, "c1"))
    assert result.rejection is not None and result.rejection.reason == "not_publishable"


@pytest.mark.rule("P16")
def test_the_state_round_trips_through_json() -> None:
    state = fold(published(RUN, "b1", 1, "v1"), preview(RUN, "b1", 2, "v2", candidate="c2"),
                 published(RUN, "b2", 1, "x", ordinal=2), published(RUN, "b2", 1, "y", ordinal=2))
    again = AnswerState.model_validate_json(state.model_dump_json())
    assert view(again) == view(state)
    assert again.conflicts == state.conflicts


# ---------------------------------------------------------------------- properties

BLOCKS = ["b1", "b2", "b3"]


@st.composite
def messages(draw: st.DrawFn) -> object:
    block_id = draw(st.sampled_from(BLOCKS))
    revision = draw(st.integers(1, 3))
    body = draw(st.sampled_from(["A", "B"]))
    candidate = f"c-{block_id}-{revision}-{draw(st.integers(0, 1))}"
    ordinal = BLOCKS.index(block_id) + 1
    kind = draw(st.sampled_from(["preview", "published", "withdrawn", "failed", "unknown", "rejected"]))
    if kind == "preview":
        return preview(RUN, block_id, revision, body, ordinal, candidate=candidate)
    if kind == "published":
        return published(RUN, block_id, revision, body, ordinal, candidate=candidate)
    if kind == "withdrawn":
        return withdrawn(RUN, block_id, revision)
    if kind == "failed":
        return save_failed(RUN, candidate, [block_id])
    if kind == "unknown":
        return save_unknown(RUN, candidate, [block_id])
    return rejected(RUN, candidate, block_id=block_id,
                    reason=draw(st.sampled_from(["unauthorized_source", "malformed_block"])))


@pytest.mark.rule("P16")
@pytest.mark.rule("P18")
@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), max_size=25))
def test_any_sequence_yields_one_entry_per_block_in_ordinal_order_and_saved_means_committed(seq: list) -> None:
    state = fold(*seq)
    entries = view(state)
    assert len({e["block_id"] for e in entries}) == len(entries)
    assert [e["delivery_ordinal"] for e in entries] == sorted(e["delivery_ordinal"] for e in entries)
    for entry in entries:
        block = state.blocks[entry["block_id"]]
        if entry["saved"]:
            committed = block.committed[entry["revision"]]
            assert committed.body_sha256 == entry["body_sha256"], "saved is only ever a committed body"
        if entry["status"] in ("unsaved", "save_unknown"):
            assert entry["receipt"] is None
        assert entry["revision"] > block.hidden_through or entry["status"] == "conflict"
        assert entry["revision"] not in block.conflicted or entry["status"] == "conflict"


@pytest.mark.rule("P17")
@settings(max_examples=200, deadline=None)
@given(st.lists(messages(), max_size=25))
def test_every_conflict_names_two_different_bodies_of_one_revision(seq: list) -> None:
    state = fold(*seq)
    for conflict in state.conflicts:
        assert conflict.first_sha256 != conflict.second_sha256
        assert isinstance(conflict, merge.Conflict)


@pytest.mark.rule("P16")
@pytest.mark.rule("P15")
def test_a_new_blocks_preview_is_dropped_when_its_retried_settlement_rejects_it() -> None:
    from imprint.publication.block_ids import issue_block_id

    candidate = "tool:c-retry"
    block_id = issue_block_id(RUN, candidate, 0)
    state = fold(preview(RUN, block_id, 1, "cites a source revoked before the retry", candidate=candidate))
    assert [e["block_id"] for e in view(state)] == [block_id], "the preview is shown, unsaved"
    result = apply(state, rejected(RUN, candidate))
    assert view(state) == [], "a preview that will never be committed leaves the view"
    assert result.rejection is not None and result.rejection.block_id is None, "no id is named back"
    assert named_blocks(rejected(RUN, candidate, reason="empty_body")) == (block_id,)

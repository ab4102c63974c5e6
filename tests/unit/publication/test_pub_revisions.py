"""P12: revisions keep their identity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import candidate, commit_one, new_run, registry

from imprint.contracts.publication import AnswerRevisionRejected
from imprint.publication import Commit, PublicationRun, Rejected, RevisionRejected, announce_all
from imprint.publication.block_ids import issue_block_id
from imprint.recovery.integrity import body_sha256


@pytest.mark.rule("P12")
@pytest.mark.rule("P18")
def test_a_revision_replaces_the_block_in_place(run: PublicationRun) -> None:
    first = commit_one(run, "version one")
    commit_one(run, "another block")
    revised = run.settle(candidate(markdown="version two", replaces=first.block_id), registry())[0]
    assert isinstance(revised, Commit) and revised.is_modification and revised.target == first.block_id
    assert revised.block.block_id == first.block_id
    assert revised.block.revision == 2 and revised.block.delivery_ordinal == first.block.delivery_ordinal
    live = run.live_blocks()
    assert [b.block_id for b in live].count(first.block_id) == 1 and len(live) == 2
    assert run.block(first.block_id).body_sha256 == body_sha256("version two")  # type: ignore[union-attr]


def assert_invalid_target(run: PublicationRun, replaces: object) -> None:
    before = {b.block_id: (b.revision, b.body_sha256) for b in run.live_blocks()}
    decision = run.settle(candidate(markdown="attempted change", replaces=replaces), registry())[0]
    assert isinstance(decision, RevisionRejected) and decision.reason == "invalid_target"
    assert {b.block_id: (b.revision, b.body_sha256) for b in run.live_blocks()} == before
    messages = announce_all(run.collect_events())
    assert [type(m) for m in messages] == [AnswerRevisionRejected]


@pytest.mark.rule("P12")
@pytest.mark.parametrize(
    "replaces",
    ["blk_0000000000000000000000000000dead", "section-A", "blk_", 123, ["blk_x"], {"id": "x"}, True],
    ids=["unissued", "model-chosen", "prefix", "int", "list", "object", "bool"],
)
def test_an_invalid_target_is_rejected_not_turned_into_a_new_block(run: PublicationRun, replaces: object) -> None:
    commit_one(run, "existing")
    run.collect_events()
    assert_invalid_target(run, replaces)


@pytest.mark.rule("P12")
def test_a_block_of_another_run_is_an_invalid_target() -> None:
    other = new_run(run_id="run-other")
    foreign = other.settle(candidate(run_id="run-other", markdown="theirs"), registry())[0]
    assert isinstance(foreign, Commit)
    run = new_run()
    assert_invalid_target(run, foreign.block_id)


@pytest.mark.rule("P12")
def test_a_withdrawn_block_is_an_invalid_target(run: PublicationRun) -> None:
    first = commit_one(run, "to be withdrawn")
    run.withdraw_all("conversation_deleted")
    run.collect_events()
    assert_invalid_target(run, first.block_id)


@pytest.mark.rule("P12")
def test_the_id_a_rejected_block_would_have_had_is_an_invalid_target(run: PublicationRun) -> None:
    proposal = candidate(tool_call_id="call-empty", markdown="")
    assert isinstance(run.settle(proposal, registry())[0], Rejected)
    run.collect_events()
    assert_invalid_target(run, issue_block_id(run.run_id, "tool:call-empty", 0))


@pytest.mark.rule("P12")
@pytest.mark.parametrize("replaces", [None, ""])
def test_absent_or_empty_replaces_means_a_new_block(run: PublicationRun, replaces: object) -> None:
    decision = run.settle(candidate(markdown="new", replaces=replaces), registry())[0]
    assert isinstance(decision, Commit) and not decision.is_modification


@pytest.mark.rule("P12")
def test_a_failing_revision_leaves_the_committed_body_untouched(run: PublicationRun) -> None:
    first = commit_one(run, "committed body")
    decision = run.settle(candidate(markdown="", replaces=first.block_id), registry())[0]
    assert isinstance(decision, Rejected) and decision.reason == "empty_body" and decision.block_id == first.block_id
    record = run.block(first.block_id)
    assert record is not None and record.revision == 1 and record.body_sha256 == body_sha256("committed body")


@pytest.mark.rule("P12")
@settings(max_examples=100, deadline=None)
@given(replaces=st.text(min_size=1, max_size=60).filter(lambda s: s.strip() != ""))
def test_any_unissued_target_is_invalid(replaces: str) -> None:
    run = new_run()
    commit_one(run, "existing")
    run.collect_events()
    assert_invalid_target(run, replaces)

"""P13: modification quota."""

from __future__ import annotations

import pytest
from pub_helpers import candidate, commit_one, new_run, registry

from imprint.contracts.publication import AnswerRevisionRejected
from imprint.publication import Commit, Policy, PublicationRun, RevisionRejected, Unchanged, announce_all
from imprint.recovery.integrity import body_sha256


def modify(run: PublicationRun, block_id: str, body: str, policy: Policy = Policy(), tool_call_id: str | None = None):  # type: ignore[no-untyped-def]
    return run.settle(candidate(tool_call_id=tool_call_id, markdown=body, replaces=block_id), registry(), policy)[0]


@pytest.mark.rule("P13")
def test_two_modifications_per_block(run: PublicationRun) -> None:
    block = commit_one(run, "v1").block_id
    assert isinstance(modify(run, block, "v2"), Commit)
    assert isinstance(modify(run, block, "v3"), Commit)
    run.collect_events()
    third = modify(run, block, "v4")
    assert isinstance(third, RevisionRejected) and third.reason == "quota_exceeded" and third.target == block
    assert run.block(block).revision == 3  # type: ignore[union-attr]
    assert run.block(block).body_sha256 == body_sha256("v3")  # type: ignore[union-attr]
    assert [type(m) for m in announce_all(run.collect_events())] == [AnswerRevisionRejected]


@pytest.mark.rule("P13")
def test_eight_modifications_per_run(run: PublicationRun) -> None:
    blocks = [commit_one(run, f"block {i}").block_id for i in range(5)]
    made = 0
    for block in blocks:
        for n in range(2):
            decision = modify(run, block, f"{block} rev {n}")
            if made < 8:
                assert isinstance(decision, Commit)
                made += 1
            else:
                assert isinstance(decision, RevisionRejected) and decision.reason == "quota_exceeded"
    assert run.run_modifications == 8


@pytest.mark.rule("P13")
def test_new_blocks_are_not_limited(run: PublicationRun) -> None:
    for i in range(30):
        commit_one(run, f"new block {i}")
    assert len(run.live_blocks()) == 30 and run.run_modifications == 0


@pytest.mark.rule("P13")
def test_the_quota_is_configurable(run: PublicationRun) -> None:
    policy = Policy(modifications_per_block=1, modifications_per_run=2)
    a = commit_one(run, "a").block_id
    b = commit_one(run, "b").block_id
    c = commit_one(run, "c").block_id
    assert isinstance(modify(run, a, "a2", policy), Commit)
    assert isinstance(modify(run, a, "a3", policy), RevisionRejected)
    assert isinstance(modify(run, b, "b2", policy), Commit)
    assert isinstance(modify(run, c, "c2", policy), RevisionRejected)


@pytest.mark.rule("P13")
def test_two_modifications_of_one_block_in_one_candidate_count_twice(run: PublicationRun) -> None:
    block = commit_one(run, "v1").block_id
    decisions = run.settle(candidate(blocks=[
        {"markdown": "v2", "replaces": block}, {"markdown": "v3", "replaces": block}, {"markdown": "v4", "replaces": block},
    ]), registry())
    assert [type(d) for d in decisions] == [Commit, Commit, RevisionRejected]
    assert [d.block.revision for d in decisions[:2]] == [2, 3]  # type: ignore[union-attr]


@pytest.mark.rule("P13")
@pytest.mark.rule("P14")
@pytest.mark.rule("P15")
def test_a_previewed_modification_consumed_quota_even_if_its_commit_failed(run: PublicationRun) -> None:
    block = commit_one(run, "v1").block_id
    proposal = candidate(tool_call_id="call-preview", markdown="v2", replaces=block)
    prepared = run.prepare(proposal, registry())
    assert isinstance(prepared[0], Commit)
    assert run.consume_preview_quota("tool:call-preview", 0, block)
    run.record_save_failure("tool:call-preview", "connection reset", [block])  # the commit never happened
    assert run.block_modifications == {block: 1} and run.run_modifications == 1
    assert run.block(block).revision == 1  # type: ignore[union-attr]
    assert isinstance(modify(run, block, "other v2"), Commit)
    third = modify(run, block, "other v3")
    assert isinstance(third, RevisionRejected) and third.reason == "quota_exceeded"


@pytest.mark.rule("P13")
def test_a_retried_candidate_is_counted_once(run: PublicationRun) -> None:
    block = commit_one(run, "v1").block_id
    assert isinstance(modify(run, block, "v2"), Commit)
    proposal = candidate(tool_call_id="call-retry", markdown="v3", replaces=block)
    assert run.consume_preview_quota("tool:call-retry", 0, block)
    assert not run.consume_preview_quota("tool:call-retry", 0, block)
    assert run.block_modifications[block] == 2
    # the block is at its limit, but this candidate already paid when it was previewed
    decision = run.settle(proposal, registry())[0]
    assert isinstance(decision, Commit) and decision.block.revision == 3
    assert run.block_modifications[block] == 2 and run.run_modifications == 2


@pytest.mark.rule("P13")
@pytest.mark.rule("P11")
def test_an_unchanged_candidate_uses_no_quota(run: PublicationRun) -> None:
    block = commit_one(run, "same").block_id
    for _ in range(5):
        assert isinstance(modify(run, block, "same"), Unchanged)
    assert run.run_modifications == 0


@pytest.mark.rule("P13")
def test_quota_exhaustion_leaves_the_run_usable() -> None:
    run = new_run()
    block = commit_one(run, "v1").block_id
    for body in ("v2", "v3", "v4", "v5"):
        modify(run, block, body)
    assert isinstance(run.settle(candidate(markdown="a fresh block"), registry())[0], Commit)

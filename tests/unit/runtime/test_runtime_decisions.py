"""Matching Publication's decisions to this process's proposals (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from imprint.contracts.publication import (
    AnswerPreview,
    AnswerPublished,
    AnswerRejected,
    AnswerSaveUnknown,
    BlockView,
    CommittedBlock,
    Content,
    Receipt,
)
from imprint.runtime import Decisions

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def view(candidate: str, block_id: str = "blk_1", revision: int = 1) -> dict[str, object]:
    return dict(block_id=block_id, revision=revision, delivery_ordinal=1, candidate_id=candidate,
                content=Content(type="text", markdown="x"), source_hint="sources_unverified", body_sha256="0" * 64)


def published(run: str, candidate: str, block_id: str = "blk_1") -> AnswerPublished:
    return AnswerPublished(run_id=run, block=CommittedBlock(
        **view(candidate, block_id), receipt=Receipt(receipt_id="r", log_position=1, committed_at=NOW)))


@pytest.mark.rule("P6")
async def test_a_proposal_is_settled_by_one_decision_per_block_and_previews_do_not_count() -> None:
    decisions = Decisions()
    awaited = decisions.expect("run-1", "tool:c1")
    first = published("run-1", "tool:c1", "blk_1")
    decisions.observe(first)  # may arrive before the send returns
    decisions.observe(AnswerPreview(run_id="run-1", block=BlockView(**view("tool:c1", "blk_2"))))
    awaited.expecting(2)
    assert not awaited.settled
    decisions.observe(first)  # the same announcement relayed twice
    assert not awaited.settled
    decisions.observe(AnswerRejected(run_id="run-1", candidate_id="tool:c1", block_index=1, reason="empty_body"))
    assert awaited.settled
    assert [d.type for d in await awaited.wait(0.1)] == ["answer.published", "answer.rejected"]


@pytest.mark.rule("P15")
async def test_a_save_unknown_settles_the_whole_proposal_as_unknown() -> None:
    decisions = Decisions()
    awaited = decisions.expect("run-1", "tool:c1").expecting(3)
    decisions.observe(AnswerSaveUnknown(run_id="run-1", candidate_id="tool:c1", block_ids=["blk_1"]))
    assert [d.type for d in await awaited.wait(0.1)] == ["answer.save_unknown"]


@pytest.mark.rule("P1")
async def test_decisions_of_other_runs_or_candidates_are_not_kept() -> None:
    decisions = Decisions()
    awaited = decisions.expect("run-1", "tool:c1").expecting(1)
    decisions.observe(published("run-2", "tool:c1"))
    decisions.observe(published("run-1", "tool:c2"))
    assert await awaited.wait(0.05) == [] and not awaited.settled
    assert decisions.awaits("run-1") and not decisions.awaits("run-2")
    decisions.forget("run-1", "tool:c1")
    assert not decisions.awaits("run-1")

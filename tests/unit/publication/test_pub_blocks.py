"""P6 and the seed's synthetic case: effects are per block."""

from __future__ import annotations

import pytest
from pub_helpers import ACCOUNT, PUBLIC, candidate, new_run, registry

from imprint.contracts.publication import AnswerPublished, AnswerRejected
from imprint.publication import (
    Commit,
    PublicationRun,
    Rejected,
    RevisionRejected,
    SourceFacts,
    announce_all,
)
from imprint.publication.tokens import token

MISSPELLED_PUBLIC = "src:public:annual-reprot-2024"
PRIVATE_REPORT = "src:private:acct-1:q3-portfolio-review"


@pytest.mark.rule("P6")
@pytest.mark.rule("P8")
@pytest.mark.rule("P10")
def test_seed_case_misspelled_public_citation_and_ungranted_private_report() -> None:
    """One proposal: A cites a public source with a typo, B cites a private report
    that was never granted. A is delivered with ``sources_unverified``; B is
    rejected ``unauthorized_source``. Neither decides the other's fate."""
    run = new_run()
    standing = registry().with_facts(
        SourceFacts(PRIVATE_REPORT, registered=True, scope="private", owner_account_id=ACCOUNT)
    )
    proposal = candidate(blocks=[
        {"markdown": f"A: the allocation must be read with the report date {token('cite', MISSPELLED_PUBLIC)}."},
        {"markdown": f"B: the private review shows a shift {token('cite', PRIVATE_REPORT)}."},
    ])
    a, b = run.settle(proposal, standing)

    assert isinstance(a, Commit)
    assert a.block.source_hint == "sources_unverified"
    assert [(c.source_id, c.status) for c in a.block.citations] == [(MISSPELLED_PUBLIC, "dropped")]
    assert a.block.hints == ["citation_dropped"]
    assert a.block.effective_sources == []

    assert isinstance(b, Rejected) and b.reason == "unauthorized_source" and b.block_index == 1

    messages = announce_all(run.collect_events())
    assert [type(m) for m in messages] == [AnswerPublished, AnswerRejected]
    assert PRIVATE_REPORT not in messages[1].model_dump_json()
    assert [blk.block_id for blk in run.live_blocks()] == [a.block.block_id]


@pytest.mark.rule("P6")
def test_a_defect_in_one_block_never_sinks_another(run: PublicationRun) -> None:
    decisions = run.settle(candidate(blocks=[
        {"markdown": ""},
        "not an object",
        {"markdown": "revise", "replaces": "blk_never_issued"},
        {"markdown": f"good {token('cite', PUBLIC)}"},
        {"table": {"columns": ["k", "v"], "rows": [["a", "1"]]}},
    ]), registry())
    assert [type(d) for d in decisions] == [Rejected, Rejected, RevisionRejected, Commit, Commit]
    assert [d.block_index for d in decisions] == [0, 1, 2, 3, 4]
    assert decisions[0].reason == "empty_body"  # type: ignore[union-attr]
    assert decisions[1].reason == "malformed_block"  # type: ignore[union-attr]
    assert decisions[2].reason == "invalid_target"  # type: ignore[union-attr]
    assert [b.ordinal for b in run.live_blocks()] == [1, 2]


@pytest.mark.rule("P6")
def test_inline_block_and_blocks_list_are_both_settled(run: PublicationRun) -> None:
    decisions = run.settle(candidate(markdown="inline", blocks=[{"markdown": "listed"}]), registry())
    assert [type(d) for d in decisions] == [Commit, Commit]
    assert [d.block.content.markdown for d in decisions] == ["inline", "listed"]  # type: ignore[union-attr]


@pytest.mark.rule("P6")
def test_blocks_over_the_per_candidate_limit_are_rejected_not_dropped(run: PublicationRun) -> None:
    from imprint.publication import Policy

    decisions = run.settle(candidate(blocks=[{"markdown": f"b{i}"} for i in range(5)]), registry(),
                           Policy(blocks_per_candidate=3))
    assert [type(d) for d in decisions] == [Commit, Commit, Commit, Rejected]
    assert decisions[3].reason == "malformed_block"  # type: ignore[union-attr]


@pytest.mark.rule("P6")
def test_each_block_gets_its_own_host_issued_id(run: PublicationRun) -> None:
    decisions = run.settle(candidate(tool_call_id="call-x", blocks=[{"markdown": "one"}, {"markdown": "two"}]), registry())
    ids = [d.block.block_id for d in decisions]  # type: ignore[union-attr]
    assert len(set(ids)) == 2 and all(i.startswith("blk_") for i in ids)
    again = new_run().prepare(candidate(tool_call_id="call-x", blocks=[{"markdown": "one"}, {"markdown": "two"}]), registry())
    assert [d.block.block_id for d in again] == ids  # type: ignore[union-attr]

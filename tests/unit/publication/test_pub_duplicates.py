"""P11: exact duplicates only."""

from __future__ import annotations

import pytest
from pub_helpers import PUBLIC, candidate, commit_one, new_run, registry, text_candidate

from imprint.contracts.publication import AnswerUnchanged, Receipt
from imprint.publication import (
    Commit,
    PublicationRun,
    Rejected,
    SourceFacts,
    Unchanged,
    announce_all,
)
from imprint.publication.tokens import token

BODY = f"The allocation must be read with the report date {token('cite', PUBLIC)}."
REVOKED = SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="publisher", revoked_for_all=True)


@pytest.mark.rule("P11")
@pytest.mark.rule("P1")
def test_redelivering_a_candidate_yields_one_revision(run: PublicationRun) -> None:
    proposal = candidate(tool_call_id="call-once", markdown=BODY)
    first = run.settle(proposal, registry())
    assert isinstance(first[0], Commit)
    version = run.version
    assert run.settle(proposal, registry()) == ()
    assert run.version == version
    assert run.settled("tool:call-once").blocks[0].revision == 1  # type: ignore[union-attr]
    assert len(run.live_blocks()) == 1


@pytest.mark.rule("P11")
def test_identical_modification_reuses_the_receipt(run: PublicationRun) -> None:
    original = commit_one(run, BODY)
    run.collect_events()
    receipt = run.block(original.block_id).receipt  # type: ignore[union-attr]
    decisions = run.settle(candidate(markdown=BODY, replaces=original.block_id), registry())
    assert isinstance(decisions[0], Unchanged)
    assert decisions[0].block_id == original.block_id and decisions[0].revision == 1
    assert decisions[0].receipt == Receipt.model_validate(receipt)
    assert run.block(original.block_id).revision == 1  # type: ignore[union-attr]
    assert run.run_modifications == 0 and run.block_modifications == {}
    messages = announce_all(run.collect_events())
    assert [type(m) for m in messages] == [AnswerUnchanged]


@pytest.mark.rule("P11")
@pytest.mark.rule("P1")
def test_the_same_text_through_both_entries_is_one_block(run: PublicationRun) -> None:
    original = run.settle(text_candidate(BODY), registry())[0]
    assert isinstance(original, Commit)
    again = run.settle(candidate(markdown=BODY), registry())[0]
    assert isinstance(again, Unchanged) and again.block_id == original.block_id
    assert len(run.live_blocks()) == 1


@pytest.mark.rule("P11")
@pytest.mark.parametrize(
    "variant",
    [BODY + " ", " " + BODY, BODY.replace(" ", "  ", 1), BODY.replace("report date", "reporting date"), BODY + "\n"],
    ids=["trailing-space", "leading-space", "double-space", "similar-wording", "trailing-newline"],
)
def test_whitespace_and_similar_text_are_not_duplicates(run: PublicationRun, variant: str) -> None:
    original = commit_one(run, BODY)
    decision = run.settle(candidate(markdown=variant, replaces=original.block_id), registry())[0]
    assert isinstance(decision, Commit) and decision.block.revision == 2


@pytest.mark.rule("P11")
def test_changed_bindings_with_identical_text_are_not_duplicates(run: PublicationRun) -> None:
    body = f"Weight {token('num', 'num-weight')} per {token('cite', 'src:later-granted')}"
    original = commit_one(run, body)
    run.grant_evidence("src:later-granted", "public", "publisher")
    after_grant = run.settle(candidate(markdown=body, replaces=original.block_id), registry())[0]
    assert isinstance(after_grant, Commit) and after_grant.block.revision == 2
    assert after_grant.block.content.markdown == original.block.content.markdown
    assert after_grant.block.source_hint != original.block.source_hint
    run.issue_numeric("num-weight", "12.5", "%", 2)
    after_version = run.settle(candidate(markdown=body, replaces=original.block_id), registry())[0]
    assert isinstance(after_version, Commit) and after_version.block.revision == 3


@pytest.mark.rule("P11")
@pytest.mark.rule("P16")
def test_after_a_revocation_an_identical_body_is_rechecked(run: PublicationRun) -> None:
    original = commit_one(run, BODY)
    standing = registry().with_facts(REVOKED)
    as_modification = run.settle(candidate(markdown=BODY, replaces=original.block_id), standing)[0]
    assert isinstance(as_modification, Rejected) and as_modification.reason == "unauthorized_source"
    assert as_modification.block_id == original.block_id
    as_new = run.settle(candidate(markdown=BODY), standing)[0]
    assert isinstance(as_new, Rejected) and as_new.reason == "unauthorized_source"
    run.withdraw_for_source(PUBLIC, "source_revoked")
    after_withdrawal = run.settle(candidate(markdown=BODY), standing)[0]
    assert isinstance(after_withdrawal, Rejected)


@pytest.mark.rule("P11")
def test_a_withdrawn_block_is_never_reused_as_a_duplicate() -> None:
    run = new_run()
    original = commit_one(run, "no sources at all")
    run.withdraw_all("conversation_deleted")
    again = run.settle(candidate(markdown="no sources at all"), registry())[0]
    assert isinstance(again, Commit) and again.block.block_id != original.block_id

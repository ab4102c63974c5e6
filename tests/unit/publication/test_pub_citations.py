"""P7, P8: citations need original standing; reject the dependent effect,
degrade the optional attachment."""

from __future__ import annotations

import pytest
from pub_helpers import (
    ACCOUNT,
    OTHER,
    PRIVATE_OTHER,
    PRIVATE_OWN,
    PUBLIC,
    RUN,
    UNGRANTED_PRIVATE,
    UNGRANTED_PUBLIC,
    candidate,
    new_run,
    registry,
)

from imprint.contracts.publication import AnswerRejected
from imprint.publication import Commit, PublicationRun, Rejected, SourceFacts, SourceStanding, announce_all
from imprint.publication.citations import resolve
from imprint.publication.tokens import token


def standing_with(*facts: SourceFacts) -> SourceStanding:
    standing = registry()
    for f in facts:
        standing = standing.with_facts(f)
    return standing


@pytest.mark.rule("P7")
@pytest.mark.rule("P8")
@pytest.mark.parametrize(
    ("source_id", "standing", "expected"),
    [
        (PUBLIC, registry(), "valid"),
        (PRIVATE_OWN, registry(), "valid"),
        (PRIVATE_OTHER, registry(), "unauthorized"),
        (UNGRANTED_PRIVATE, registry(), "unauthorized"),
        (UNGRANTED_PUBLIC, registry(), "unresolved"),
        ("src:public:annual-reprot-2024", registry(), "unresolved"),
        (PUBLIC[:-4], registry(), "unresolved"),
        ("Annual report 2024", registry(), "unresolved"),
        (PUBLIC.upper(), registry(), "unresolved"),
        (PUBLIC, standing_with(SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="p", revoked_for_all=True)), "unauthorized"),
        (PUBLIC, standing_with(SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="p", revoked_accounts=frozenset({ACCOUNT}))), "unauthorized"),
        (PUBLIC, standing_with(SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="p", revoked_accounts=frozenset({OTHER}))), "valid"),
        (PUBLIC, standing_with(SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="p", tombstoned=True)), "unauthorized"),
        (PUBLIC, standing_with(SourceFacts(PUBLIC, registered=True, scope="private", owner_account_id=OTHER)), "unauthorized"),
        (PUBLIC, SourceStanding(), "valid"),
    ],
    ids=[
        "granted-public", "granted-own-private", "granted-but-another-accounts", "private-not-granted",
        "public-not-granted", "misspelled", "truncated", "guessed-title", "wrong-case", "revoked", "revoked-for-account",
        "revoked-for-other-account", "tombstoned", "registry-says-private", "granted-unregistered",
    ],
)
def test_citation_standing(source_id: str, standing: SourceStanding, expected: str) -> None:
    assert resolve(source_id, new_run().facts(), standing).standing == expected


@pytest.mark.rule("P7")
def test_without_an_admitted_account_no_private_source_is_valid() -> None:
    run = PublicationRun(run_id=RUN)
    run.grant_evidence(PRIVATE_OWN, "private", ACCOUNT)
    assert resolve(PRIVATE_OWN, run.facts(), registry()).standing == "unauthorized"


@pytest.mark.rule("P7")
def test_search_hits_and_guesses_do_not_count() -> None:
    run = new_run()
    body = f"Per {token('cite', 'Annual report 2024')} and {token('cite', 'https://example.com/report')}."
    commit = run.settle(candidate(markdown=body), registry())[0]
    assert isinstance(commit, Commit)
    assert {c.status for c in commit.block.citations} == {"dropped"}
    assert commit.block.source_hint == "sources_unverified"


@pytest.mark.rule("P8")
@pytest.mark.parametrize("source_id", [PRIVATE_OTHER, UNGRANTED_PRIVATE])
def test_unauthorized_source_rejects_the_block_alone_with_a_client_safe_reason(source_id: str) -> None:
    run = new_run()
    decisions = run.settle(candidate(blocks=[
        {"markdown": f"valid one {token('cite', PUBLIC)}"},
        {"markdown": f"also cites a fine source {token('cite', PUBLIC)} but relies on {token('cite', source_id)}"},
    ]), registry())
    assert isinstance(decisions[0], Commit)
    assert isinstance(decisions[1], Rejected) and decisions[1].reason == "unauthorized_source"
    assert source_id in decisions[1].detail
    rejected = [m for m in announce_all(run.collect_events()) if isinstance(m, AnswerRejected)]
    assert len(rejected) == 1 and source_id not in rejected[0].model_dump_json()


@pytest.mark.rule("P8")
def test_a_valid_body_is_never_swallowed_because_an_attachment_is_bad() -> None:
    run = new_run()
    body = (
        f"Keeps its text {token('cite', PUBLIC)} {token('cite', 'src:typo')} "
        f"value {token('num', 'num-unknown')} see {token('ref', 'blk_nonexistent')}."
    )
    commit = run.settle(candidate(markdown=body, display={"bogus": True}, role="weird"), registry())[0]
    assert isinstance(commit, Commit)
    assert commit.block.source_hint == "sources_partial"
    assert set(commit.block.hints) == {"citation_dropped", "numeric_unavailable", "metadata_dropped"}
    assert commit.block.depends_on == []
    assert "Keeps its text" in commit.block.content.markdown


@pytest.mark.rule("P8")
def test_citation_order_and_duplicates_in_bindings(run: PublicationRun) -> None:
    body = f"{token('cite', PUBLIC)} {token('cite', 'x:typo')} {token('cite', PUBLIC)} {token('cite', PRIVATE_OWN)}"
    commit = run.settle(candidate(markdown=body), registry())[0]
    assert isinstance(commit, Commit)
    assert [(c.source_id, c.status) for c in commit.block.citations] == [
        (PUBLIC, "valid"), ("x:typo", "dropped"), (PRIVATE_OWN, "valid"),
    ]
    assert commit.block.effective_sources == sorted([PUBLIC, PRIVATE_OWN])

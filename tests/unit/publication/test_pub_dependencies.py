"""P21: effective sources through dependencies; revocation withdraws, audit keeps."""

from __future__ import annotations

import pytest
from pub_helpers import ACCOUNT, OTHER, PRIVATE_OWN, PUBLIC, candidate, commit_one, registry

from imprint.contracts.publication import AnswerWithdrawn
from imprint.publication import BlockRecord, Commit, PublicationRun, Rejected, SourceFacts, announce_all
from imprint.publication.dependencies import blocks_to_withdraw, check_dependencies
from imprint.publication.tokens import token

REVOKED = SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="publisher", revoked_for_all=True)


def chain(run: PublicationRun) -> tuple[Commit, Commit, Commit, Commit]:
    """A cites PUBLIC; B refs A; C depends_on B; D stands alone on PRIVATE_OWN."""
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    b = commit_one(run, f"B builds on {token('ref', a.block_id)}")
    c = commit_one(run, "C summarises B", depends_on=[b.block_id])
    d = commit_one(run, f"D {token('cite', PRIVATE_OWN)}")
    return a, b, c, d


@pytest.mark.rule("P21")
def test_effective_sources_are_inherited_transitively(run: PublicationRun) -> None:
    a, b, c, d = chain(run)
    assert a.block.effective_sources == [PUBLIC]
    assert b.block.effective_sources == [PUBLIC] and b.block.depends_on == [a.block_id]
    assert c.block.effective_sources == [PUBLIC] and c.block.depends_on == [b.block_id]
    assert d.block.effective_sources == [PRIVATE_OWN]
    assert b.block.source_hint == "sources_unverified"  # the hint is about its own citations


@pytest.mark.rule("P21")
def test_revocation_withdraws_every_dependent_block_and_keeps_history(run: PublicationRun) -> None:
    a, b, c, d = chain(run)
    run.collect_events()
    withdrawn = run.withdraw_for_source(PUBLIC, "source_revoked")
    assert withdrawn == [a.block_id, b.block_id, c.block_id]
    assert [r.block_id for r in run.live_blocks()] == [d.block_id]
    messages = announce_all(run.collect_events())
    assert all(isinstance(m, AnswerWithdrawn) and m.cause == "source_revoked" and m.source_id == PUBLIC for m in messages)
    assert [m.block_id for m in messages] == withdrawn  # type: ignore[union-attr]
    audit = run.block(a.block_id)
    assert audit is not None and not audit.live and audit.body_sha256 == a.block.body_sha256
    assert audit.receipt is not None and audit.withdrawn == {"cause": "source_revoked", "source_id": PUBLIC}
    assert run.withdraw_for_source(PUBLIC, "source_revoked") == []


@pytest.mark.rule("P21")
def test_a_later_revision_of_a_dependency_reaches_its_dependents(run: PublicationRun) -> None:
    a = commit_one(run, "A without sources")
    b = commit_one(run, f"B on {token('ref', a.block_id)}")
    assert b.block.effective_sources == []
    run.settle(candidate(markdown=f"A now cites {token('cite', PUBLIC)}", replaces=a.block_id), registry())
    assert run.withdraw_for_source(PUBLIC, "source_tombstoned") == [a.block_id, b.block_id]


@pytest.mark.rule("P21")
def test_a_revocation_for_another_account_leaves_the_run_alone(run: PublicationRun) -> None:
    chain(run)
    assert run.withdraw_for_source(PUBLIC, "source_revoked", account_id=OTHER) == []
    assert len(run.withdraw_for_source(PUBLIC, "source_revoked", account_id=ACCOUNT)) == 3


@pytest.mark.rule("P21")
def test_numeric_sources_count_as_effective_sources(run: PublicationRun) -> None:
    n = commit_one(run, f"weight {token('num', 'num-weight')}")
    assert n.block.effective_sources == [PUBLIC]
    assert run.withdraw_for_source(PUBLIC, "source_revoked") == [n.block_id]


@pytest.mark.rule("P21")
@pytest.mark.rule("P8")
def test_a_dependency_that_resolves_to_nothing_is_dropped_with_a_hint(run: PublicationRun) -> None:
    commit = commit_one(run, f"see {token('ref', 'blk_0000000000000000000000000000beef')}", depends_on=["made-up"])
    assert commit.block.depends_on == [] and commit.block.hints == ["metadata_dropped"]
    assert commit.block.effective_sources == []


@pytest.mark.rule("P21")
@pytest.mark.rule("P8")
def test_building_on_a_withdrawn_block_is_rejected(run: PublicationRun) -> None:
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    run.withdraw_for_source(PUBLIC, "source_revoked")
    decision = run.settle(candidate(markdown=f"more on {token('ref', a.block_id)}"), registry())[0]
    assert isinstance(decision, Rejected) and decision.reason == "unauthorized_source"


@pytest.mark.rule("P21")
@pytest.mark.rule("P8")
def test_an_inherited_source_revoked_before_withdrawal_rejects_the_dependent(run: PublicationRun) -> None:
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    decision = run.settle(candidate(markdown="B", depends_on=[a.block_id]), registry().with_facts(REVOKED))[0]
    assert isinstance(decision, Rejected) and decision.reason == "unauthorized_source"
    independent = run.settle(candidate(markdown="independent"), registry().with_facts(REVOKED))[0]
    assert isinstance(independent, Commit)


@pytest.mark.rule("P21")
def test_cycles_are_safe(run: PublicationRun) -> None:
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    b = commit_one(run, f"B on {token('ref', a.block_id)}")
    revised = run.settle(candidate(markdown=f"A on {token('ref', b.block_id)} and self {token('ref', a.block_id)}",
                                   replaces=a.block_id), registry())[0]
    assert isinstance(revised, Commit)
    assert revised.block.depends_on == [b.block_id] and "metadata_dropped" in revised.block.hints
    assert revised.block.effective_sources == [PUBLIC]
    assert run.withdraw_for_source(PUBLIC, "source_revoked") == [a.block_id, b.block_id]


def record(block_id: str, ordinal: int, sources: tuple[str, ...] | None, depends_on: tuple[str, ...] = ()) -> BlockRecord:
    return BlockRecord(block_id, 1, ordinal, "c", "f", "h", "sources_unverified", sources, depends_on)


@pytest.mark.rule("P21")
def test_unknown_effective_sources_are_withdrawn_not_trusted() -> None:
    blocks = {
        "legacy": record("legacy", 1, None),
        "clean": record("clean", 2, ()),
        "on-legacy": record("on-legacy", 3, (), ("legacy",)),
    }
    assert blocks_to_withdraw(blocks, "any-source") == ["legacy", "on-legacy"]
    check = check_dependencies(None, ["legacy"], blocks.get, lambda _: True)
    assert check.kept == ("legacy",) and check.inherited is None


@pytest.mark.rule("P21")
def test_long_dependency_chains_and_cycles_terminate() -> None:
    n = 500
    blocks = {f"b{i}": record(f"b{i}", i + 1, ("S",) if i == 0 else (), (f"b{i - 1}",) if i else (f"b{n - 1}",)) for i in range(n)}
    assert len(blocks_to_withdraw(blocks, "S")) == n
    check = check_dependencies(None, [f"b{n - 1}"], blocks.get, lambda _: True)
    assert check.inherited == ("S",)

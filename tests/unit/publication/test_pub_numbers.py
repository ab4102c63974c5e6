"""P9: controlled numbers."""

from __future__ import annotations

import pytest
from pub_helpers import PUBLIC, candidate, new_run, registry

from imprint.publication import Commit, SourceFacts
from imprint.publication.numbers import UNAVAILABLE
from imprint.publication.tokens import token


def rendered(run, body: str, standing=None) -> Commit:  # type: ignore[no-untyped-def]
    commit = run.settle(candidate(markdown=body), standing or registry())[0]
    assert isinstance(commit, Commit), commit
    return commit


@pytest.mark.rule("P9")
def test_a_handle_renders_the_host_value_with_its_unit() -> None:
    commit = rendered(new_run(), f"Weight: {token('num', 'num-weight')}.")
    assert commit.block.content.markdown == "Weight: 12.5 %."
    assert [(n.handle_id, n.rendered, n.version) for n in commit.block.numbers] == [("num-weight", "12.5 %", 1)]
    assert commit.block.hints == []
    assert commit.block.effective_sources == [PUBLIC]


@pytest.mark.rule("P9")
def test_the_current_version_is_rendered_and_older_versions_are_ignored() -> None:
    run = new_run()
    assert run.issue_numeric("num-weight", "13.0", "%", 3)
    assert not run.issue_numeric("num-weight", "99", "%", 2)
    commit = rendered(run, token("num", "num-weight"))
    assert commit.block.content.markdown == "13.0 %" and commit.block.numbers[0].version == 3


@pytest.mark.rule("P9")
@pytest.mark.parametrize("handle", ["num-unknown", "num-weigh", "NUM-WEIGHT", "num-weight@1x"])
def test_unknown_handles_are_never_guessed(handle: str) -> None:
    commit = rendered(new_run(), f"Value {token('num', handle)} here")
    assert commit.block.content.markdown == f"Value {UNAVAILABLE} here"
    assert commit.block.hints == ["numeric_unavailable"]
    assert commit.block.numbers[0].version is None


@pytest.mark.rule("P9")
def test_a_foreign_handle_is_unavailable() -> None:
    other = new_run(run_id="run-other")
    other.issue_numeric("num-foreign", "42", "EUR", 1)
    commit = rendered(new_run(), token("num", "num-foreign"))
    assert commit.block.content.markdown == UNAVAILABLE and commit.block.hints == ["numeric_unavailable"]


@pytest.mark.rule("P9")
def test_a_stale_pinned_version_is_unavailable_and_the_current_pin_renders() -> None:
    run = new_run()
    run.issue_numeric("num-weight", "14", "%", 2)
    assert rendered(run, token("num", "num-weight@1")).block.content.markdown == UNAVAILABLE
    assert rendered(run, token("num", "num-weight@2")).block.content.markdown == "14 %"


@pytest.mark.rule("P9")
def test_a_value_whose_source_was_revoked_is_unavailable() -> None:
    standing = registry().with_facts(
        SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="p", revoked_for_all=True)
    )
    commit = rendered(new_run(), f"plain {token('num', 'num-weight')}", standing)
    assert commit.block.content.markdown == f"plain {UNAVAILABLE}" and commit.block.effective_sources == []


@pytest.mark.rule("P9")
def test_literal_numbers_are_plain_uncertified_text() -> None:
    commit = rendered(new_run(), "Bonds are 12.5% and the ratio is 3/4.")
    assert commit.block.content.markdown == "Bonds are 12.5% and the ratio is 3/4."
    assert commit.block.numbers == [] and commit.block.hints == []


@pytest.mark.rule("P9")
def test_a_unit_cannot_smuggle_a_token_into_the_display() -> None:
    run = new_run()
    run.issue_numeric("num-odd", "1", "[[cite:src:x]]\x00", 1)
    commit = rendered(run, token("num", "num-odd"))
    assert "[[" not in commit.block.content.markdown and commit.block.citations == []

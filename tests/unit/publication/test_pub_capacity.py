"""P5: capacity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import PUBLIC, candidate, new_run, registry

from imprint.publication import Commit, Policy
from imprint.publication.capacity import TRUNCATION_MARKER, fit_text
from imprint.publication.tokens import scan, token


@pytest.mark.rule("P5")
def test_text_within_the_limit_is_untouched() -> None:
    fitted = fit_text("x" * 100, 100)
    assert fitted.text == "x" * 100 and not fitted.truncated


@pytest.mark.rule("P5")
def test_over_the_limit_keeps_a_prefix_and_an_explicit_marker() -> None:
    body = "word " * 30_000
    fitted = fit_text(body, 60_000)
    assert fitted.truncated and fitted.text.endswith(TRUNCATION_MARKER)
    assert len(fitted.text) <= 60_000
    kept = fitted.text[: -len(TRUNCATION_MARKER)]
    assert body.startswith(kept) and len(kept) > 59_000


@pytest.mark.rule("P5")
def test_the_cut_never_splits_a_token() -> None:
    cite = token("cite", PUBLIC)
    limit = 200
    for offset in range(0, 60):
        body = "y" * (limit - len(TRUNCATION_MARKER) - offset) + cite + "z" * 500
        kept = fit_text(body, limit).text[: -len(TRUNCATION_MARKER)]
        assert cite in kept or "[[" not in kept, offset


@pytest.mark.rule("P5")
def test_settled_block_over_60000_chars_is_truncated_with_hint() -> None:
    run = new_run()
    body = ("Paragraph with a citation " + token("cite", PUBLIC) + " and a value " + token("num", "num-weight") + ".\n") * 1500
    assert len(body) > 60_000
    decisions = run.settle(candidate(markdown=body), registry())
    commit = decisions[0]
    assert isinstance(commit, Commit)
    assert commit.block.truncated and "truncated" in commit.block.hints
    markdown = commit.block.content.markdown
    assert len(markdown) <= 60_000 and markdown.endswith(TRUNCATION_MARKER)
    # a rendered value is whole or absent: every "12.5" is followed by its unit
    assert markdown.count("12.5") == markdown.count("12.5 %")
    assert markdown.count("[[cite:") == markdown.count(token("cite", PUBLIC))


@pytest.mark.rule("P5")
def test_the_limit_is_configurable() -> None:
    run = new_run()
    decisions = run.settle(candidate(markdown="a" * 500), registry(), Policy(display_char_limit=100))
    commit = decisions[0]
    assert isinstance(commit, Commit) and commit.block.truncated and len(commit.block.content.markdown) <= 100


@pytest.mark.rule("P5")
def test_a_rendered_value_at_the_cut_is_kept_whole_or_dropped_whole() -> None:
    limit = 100
    for filler in range(60, 100):
        run = new_run()
        run.issue_numeric("num-long", "123456789.123456789", "EUR", 1)
        body = "f" * filler + token("num", "num-long") + " tail " * 50
        commit = run.settle(candidate(markdown=body), registry(), Policy(display_char_limit=limit))[0]
        assert isinstance(commit, Commit)
        text = commit.block.content.markdown
        assert len(text) <= limit
        rendered = "123456789.123456789 EUR"
        assert rendered in text or "1" not in text, filler
        assert [n.handle_id for n in commit.block.numbers] == (["num-long"] if rendered in text else [])


pieces = st.lists(
    st.one_of(
        st.text(st.characters(blacklist_characters="[]", blacklist_categories=("Cs",)), max_size=80),
        st.builds(token, st.sampled_from(["cite", "num", "ref"]), st.text("abcdef:-_", min_size=1, max_size=40)),
    ),
    max_size=30,
)


@pytest.mark.rule("P5")
@settings(max_examples=200, deadline=None)
@given(parts=pieces, limit=st.integers(min_value=64, max_value=600))
def test_truncation_properties(parts: list[str], limit: int) -> None:
    body = "".join(parts)
    fitted = fit_text(body, limit)
    assert len(fitted.text) <= limit
    if not fitted.truncated:
        assert fitted.text == body
        return
    assert fitted.text.endswith(TRUNCATION_MARKER)
    kept = fitted.text[: -len(TRUNCATION_MARKER)]
    assert body.startswith(kept)
    for t in scan(body):
        assert t.end <= len(kept) or t.start >= len(kept), "a token was split"

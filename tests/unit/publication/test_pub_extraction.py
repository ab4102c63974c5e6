"""P4: mechanical extraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import PUBLIC, candidate, new_run, registry

from imprint.publication import Commit, Rejected
from imprint.publication.candidate import ProposedBlock
from imprint.publication.extraction import Extracted, NotExtractable, clean, extract, render_table
from imprint.publication.tokens import scan, token


@pytest.mark.rule("P4")
def test_control_characters_are_removed_except_newline_and_tab() -> None:
    raw = "a\x00b\x07c\td\ne\x1bf\x7fg\x85h\r\ni\rj"
    assert clean(raw) == "abc\td\nefgh\ni\nj"


@pytest.mark.rule("P4")
def test_lone_surrogates_are_removed_so_the_body_is_storable() -> None:
    cleaned = clean("ok\ud800 fine")
    assert cleaned == "ok fine"
    cleaned.encode("utf-8")


@pytest.mark.rule("P4")
def test_tokens_survive_normalization() -> None:
    raw = f"\x01{token('cite', PUBLIC)}\x02 {token('num', 'num-weight')}\x1f{token('ref', 'blk_x')}\x00"
    extracted = extract(ProposedBlock(0, markdown=raw))
    assert isinstance(extracted, Extracted)
    assert [(t.kind, t.id) for t in scan(extracted.text)] == [("cite", PUBLIC), ("num", "num-weight"), ("ref", "blk_x")]


@pytest.mark.rule("P4")
def test_whitespace_is_kept_as_written() -> None:
    extracted = extract(ProposedBlock(0, markdown="  two  spaces\n\n\ttab  "))
    assert isinstance(extracted, Extracted) and extracted.text == "  two  spaces\n\n\ttab  "


@pytest.mark.rule("P4")
def test_table_content_becomes_a_markdown_table() -> None:
    table = {"columns": ["Fund", "Weight"], "rows": [["A|B", 12.5], ["C", None], ["D"]]}
    extracted = extract(ProposedBlock(0, table=table))
    assert isinstance(extracted, Extracted) and extracted.content_type == "table"
    assert extracted.text == "| Fund | Weight |\n| --- | --- |\n| A\\|B | 12.5 |\n| C |  |\n| D |  |"


@pytest.mark.rule("P4")
def test_a_token_in_a_table_cell_keeps_its_exact_id() -> None:
    odd_id = "src:weird|id"
    rendered = render_table({"columns": ["Claim"], "rows": [[f"see {token('cite', odd_id)} | more"]]})
    assert rendered is not None
    assert [t.id for t in scan(rendered)] == [odd_id]
    assert "\\| more" in rendered


@pytest.mark.rule("P4")
def test_wide_rows_widen_the_header_instead_of_losing_cells() -> None:
    rendered = render_table({"columns": ["a"], "rows": [["1", "2", "3"]]})
    assert rendered == "| a |  |  |\n| --- | --- | --- |\n| 1 | 2 | 3 |"


@pytest.mark.rule("P4")
def test_markdown_and_table_are_both_kept() -> None:
    extracted = extract(ProposedBlock(0, markdown="Intro", table={"columns": ["x"], "rows": [["1"]]}))
    assert isinstance(extracted, Extracted) and extracted.content_type == "text"
    assert extracted.text.startswith("Intro\n\n| x |")


@pytest.mark.rule("P4")
@pytest.mark.parametrize(
    "block",
    [
        ProposedBlock(0),
        ProposedBlock(0, markdown=""),
        ProposedBlock(0, markdown=" \n\t "),
        ProposedBlock(0, markdown="\x00\x01\x02"),
        ProposedBlock(0, table={"columns": [], "rows": []}),
        ProposedBlock(0, table={"columns": ["", ""], "rows": [[None, ""]]}),
    ],
    ids=["nothing", "empty", "whitespace", "only-control", "empty-table", "blank-table"],
)
def test_nothing_extractable_is_empty_body(block: ProposedBlock) -> None:
    result = extract(block)
    assert isinstance(result, NotExtractable) and result.reason == "empty_body"


@pytest.mark.rule("P4")
@pytest.mark.parametrize(
    "block",
    [
        ProposedBlock(0, markdown=123),
        ProposedBlock(0, markdown={"text": "x"}),
        ProposedBlock(0, table=5),
        ProposedBlock(0, malformed="block is a str, not an object"),
    ],
    ids=["int-markdown", "dict-markdown", "non-table", "non-object"],
)
def test_a_block_that_is_not_content_is_malformed(block: ProposedBlock) -> None:
    result = extract(block)
    assert isinstance(result, NotExtractable) and result.reason == "malformed_block"


@pytest.mark.rule("P4")
def test_empty_body_is_rejected_at_settlement_and_nothing_is_invented() -> None:
    run = new_run()
    decisions = run.settle(candidate(markdown="\x00 \x01"), registry())
    assert isinstance(decisions[0], Rejected) and decisions[0].reason == "empty_body"
    assert run.live_blocks() == []


@pytest.mark.rule("P4")
def test_role_and_labels_are_normalized() -> None:
    extracted = extract(ProposedBlock(0, markdown="x", role="  Summary ", display={"labels": [" Key  Point ", "key point", "RISK"]}))
    assert isinstance(extracted, Extracted)
    assert extracted.role == "summary" and extracted.labels == ("key point", "risk") and extracted.dropped == ()
    extracted = extract(ProposedBlock(0, markdown="x", role="system-override", display={"colour": "red", "label": 7}))
    assert isinstance(extracted, Extracted) and extracted.role == "answer"
    assert set(extracted.dropped) == {"role", "display.colour", "display.label"}


@pytest.mark.rule("P4")
@pytest.mark.rule("P8")
def test_invalid_metadata_is_dropped_and_the_body_is_kept() -> None:
    run = new_run()
    decisions = run.settle(
        candidate(markdown="Body stays.", role=42, display=["x"], depends_on="blk_nope"), registry()
    )
    commit = decisions[0]
    assert isinstance(commit, Commit)
    assert commit.block.content.markdown == "Body stays."
    assert commit.block.role == "answer" and commit.block.hints == ["metadata_dropped"]


noise = st.text(st.characters(blacklist_characters="[]"), max_size=30)
ids = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="[]"), min_size=1, max_size=30)


@pytest.mark.rule("P4")
@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.tuples(noise, st.sampled_from(["cite", "num", "ref"]), ids), max_size=6), tail=noise)
def test_normalization_never_erases_a_token(parts: list[tuple[str, str, str]], tail: str) -> None:
    raw = "".join(f"{n}[[{k}:{i}]]" for n, k, i in parts) + tail
    result = extract(ProposedBlock(0, markdown=raw))
    expected = [(k, i) for _, k, i in parts]
    if isinstance(result, NotExtractable):
        assert result.reason == "empty_body" and expected == []
        return
    found = [(t.kind, t.id) for t in scan(result.text)]
    # every proposed token is still there, in order (cleaning may only join text, never split a token)
    it = iter(found)
    assert all(any(f == e for f in it) for e in expected)

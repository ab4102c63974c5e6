"""P10: source hints belong to the block revision."""

from __future__ import annotations

import pytest
from pub_helpers import PUBLIC, PRIVATE_OWN, candidate, new_run, registry

from imprint.publication import Commit
from imprint.publication.hints import (
    HintBinding,
    describe_sources,
    read_hint,
    source_hint,
    union_sources,
)
from imprint.publication.tokens import token


@pytest.mark.rule("P10")
@pytest.mark.parametrize(
    ("body", "hint"),
    [
        (f"{token('cite', PUBLIC)} {token('cite', PRIVATE_OWN)}", "sources_verified"),
        (f"{token('cite', PUBLIC)} {token('cite', 'src:typo')}", "sources_partial"),
        (f"{token('cite', 'src:typo')}", "sources_unverified"),
        ("no citations at all", "sources_unverified"),
    ],
)
def test_hint_per_block(body: str, hint: str) -> None:
    commit = new_run().settle(candidate(markdown=body), registry())[0]
    assert isinstance(commit, Commit) and commit.block.source_hint == hint


@pytest.mark.rule("P10")
def test_source_hint_counts() -> None:
    assert source_hint(0, 0) == "sources_unverified"
    assert source_hint(0, 3) == "sources_unverified"
    assert source_hint(1, 3) == "sources_partial"
    assert source_hint(3, 3) == "sources_verified"


@pytest.mark.rule("P10")
def test_an_unverified_hint_is_a_block_fact_not_a_run_state() -> None:
    run = new_run()
    decisions = run.settle(candidate(markdown="unsourced claim"), registry())
    assert isinstance(decisions[0], Commit)
    event_names = {type(e).__name__ for e in run.collect_events()}
    assert event_names == {"BlockRevisionCommitted"}
    assert not any("interrupt" in name.lower() for name in event_names)


def committed_record() -> dict:
    commit = new_run().settle(candidate(markdown=token("cite", PUBLIC)), registry())[0]
    assert isinstance(commit, Commit)
    return dict(commit.state)


@pytest.mark.rule("P10")
def test_a_bound_hint_reads_back() -> None:
    record = committed_record()
    binding = HintBinding(record["block_id"], record["revision"], record["body_sha256"])
    assert read_hint(record, binding) == "sources_verified"


@pytest.mark.rule("P10")
def test_a_legacy_receipt_without_a_hint_reads_as_unknown() -> None:
    record = committed_record()
    binding = HintBinding(record["block_id"], record["revision"], record["body_sha256"])
    legacy = {k: v for k, v in record.items() if k != "source_hint"}
    assert read_hint(legacy, binding) == "unknown"
    assert read_hint({**record, "source_hint": None}, binding) == "unknown"
    assert read_hint({**record, "source_hint": "clean"}, binding) == "unknown"


@pytest.mark.rule("P10")
@pytest.mark.parametrize("field", ["block_id", "revision", "body_sha256"])
def test_a_mismatched_binding_reads_as_unknown(field: str) -> None:
    record = committed_record()
    binding = HintBinding(record["block_id"], record["revision"], record["body_sha256"])
    changed = {**record, field: 99 if field == "revision" else "something-else"}
    assert read_hint(changed, binding) == "unknown"
    missing = {k: v for k, v in record.items() if k != field}
    assert read_hint(missing, binding) == "unknown"


@pytest.mark.rule("P10")
def test_verified_empty_sources_are_distinct_from_unknown() -> None:
    commit = new_run().settle(candidate(markdown="no sources here"), registry())[0]
    assert isinstance(commit, Commit)
    assert commit.block.effective_sources == []
    assert describe_sources(()) == "verified_empty"
    assert describe_sources(None) == "unknown"
    assert describe_sources(("a",)) == "known"
    assert union_sources((), None) is None
    assert union_sources(("b",), ("a", "b")) == ("a", "b")

"""P18: position."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import candidate, commit_one, new_run, registry

from imprint.publication import Commit, PublicationRun
from imprint.publication.ordinals import advance, ordinal_for


@pytest.mark.rule("P18")
def test_ordinals_are_assigned_at_first_commit_and_kept_by_revisions(run: PublicationRun) -> None:
    a = commit_one(run, "A")
    run.settle(candidate(markdown=""), registry())  # rejected: takes no position
    b = commit_one(run, "B")
    a2 = run.settle(candidate(markdown="A revised", replaces=a.block_id), registry())[0]
    c = commit_one(run, "C")
    assert isinstance(a2, Commit)
    assert (a.block.delivery_ordinal, b.block.delivery_ordinal, c.block.delivery_ordinal) == (1, 2, 3)
    assert a2.block.delivery_ordinal == 1 and a2.block.revision == 2
    assert [(r.block_id, r.ordinal) for r in run.live_blocks()] == [(a.block_id, 1), (b.block_id, 2), (c.block_id, 3)]


@pytest.mark.rule("P18")
def test_ordinals_keep_increasing_after_a_withdrawal(run: PublicationRun) -> None:
    commit_one(run, "A")
    run.withdraw_all("conversation_deleted")
    assert commit_one(run, "B").block.delivery_ordinal == 2


@pytest.mark.rule("P18")
def test_ordinal_helpers() -> None:
    assert advance(3, 3) == 4 and advance(5, 2) == 5
    assert ordinal_for(None, 7) == 7


@pytest.mark.rule("P18")
@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 10), st.booleans()), max_size=30))
def test_ordinal_properties(ops: list[tuple[bool, int, bool]]) -> None:
    run = new_run()
    first_ordinal: dict[str, int] = {}
    order: list[str] = []
    for is_new, pick, empty in ops:
        body = "" if empty else f"body {len(order)} {pick}"
        if is_new or not order:
            decision = run.settle(candidate(markdown=body), registry())[0]
        else:
            decision = run.settle(candidate(markdown=body, replaces=order[pick % len(order)]), registry())[0]
        if isinstance(decision, Commit):
            block = decision.block
            if block.block_id not in first_ordinal:
                first_ordinal[block.block_id] = block.delivery_ordinal
                order.append(block.block_id)
            assert block.delivery_ordinal == first_ordinal[block.block_id]
    assert [first_ordinal[b] for b in order] == list(range(1, len(order) + 1))

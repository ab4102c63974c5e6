"""Hostile input of any kind ends in a typed outcome, never an exception, and
never changes what was already committed (P2–P6, §7)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pub_helpers import PRIVATE_OTHER, PRIVATE_OWN, PUBLIC, RUN, commit_one, new_run, registry

from imprint.contracts.runtime import AnswerPart
from imprint.publication import (
    Candidate,
    Commit,
    IntakeRefusal,
    PublicationRun,
    Rejected,
    RevisionRejected,
    Unchanged,
    announce_all,
    intake,
)
from imprint.publication.capacity import TRUNCATION_MARKER
from imprint.publication.settlement import INTERNAL_ERROR
from imprint.publication.tokens import token

FRAGMENTS = [
    "[[", "]]", "[[cite:", "[[num:", "[[ref:", "[[cite:]]", "[[num:num-weight", "num-weight]]",
    token("cite", PUBLIC), token("cite", PRIVATE_OWN), token("cite", PRIVATE_OTHER), token("cite", "src:typo"),
    token("num", "num-weight"), token("num", "num-weight@1"), token("num", "num-weight@9"), token("num", "nope"),
    token("ref", "blk_00000000000000000000000000000000"), "[[cite:[[cite:x]]]]", "[[CITE:x]]",
    "\x00", "\x07", "\x1b[31m", "\x7f", "\x85", "\r\n", "\r", "\t", "\n", "\u200b", "\u202e", "\ufeff", "\ud800", "\udfff",
    "👩‍👩‍👧", "é", "ℌ", "\U0010ffff", "|", "| a | b |\n| --- | --- |", "```", "<script>", " ", "  ",
]

hostile_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=40
).map("".join)

json_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | hostile_text
json_any = st.recursive(json_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=10)


EXISTING_BODIES = [f"existing {i} {token('cite', PUBLIC)}" for i in range(2)]


def block_strategy(existing: list[str]):  # type: ignore[no-untyped-def]
    return st.fixed_dictionaries(
        {},
        optional={
            "markdown": st.one_of(hostile_text, hostile_text, hostile_text, st.sampled_from(EXISTING_BODIES), json_any),
            "replaces": st.sampled_from(existing) | json_any if existing else json_any,
            "table": st.fixed_dictionaries({"columns": st.lists(json_scalar, max_size=4),
                                            "rows": st.lists(st.lists(json_scalar, max_size=5), max_size=4)}) | json_any,
            "role": st.sampled_from(["summary", "Caveat", None]) | json_any,
            "depends_on": st.lists(st.sampled_from(existing) if existing else st.text(max_size=5), max_size=3) | json_any,
            "display": json_any,
        },
    )


def snapshot_of(run: PublicationRun) -> dict[str, tuple[int, int, str]]:
    return {r.block_id: (r.revision, r.ordinal, r.body_sha256) for r in run.live_blocks()}


def assert_typed(decisions: tuple, before: dict[str, tuple[int, int, str]], run: PublicationRun) -> None:  # type: ignore[type-arg]
    modified: dict[str, int] = {}
    for decision in decisions:
        assert isinstance(decision, (Commit, Unchanged, Rejected, RevisionRejected))
        if isinstance(decision, Rejected):
            assert INTERNAL_ERROR not in decision.detail, decision
        if isinstance(decision, Commit):
            text = decision.block.content.markdown
            assert len(text) <= 60_000
            text.encode("utf-8")
            assert not any(ch in text for ch in "\x00\x07\x1b\x7f\x85\r\ud800")
            if decision.is_modification:
                modified[decision.block_id] = modified.get(decision.block_id, 0) + 1
    after = snapshot_of(run)
    for block_id, (revision, ordinal, sha) in before.items():
        if block_id not in modified:
            assert after[block_id] == (revision, ordinal, sha), "an untouched committed block changed"
        else:
            assert after[block_id][0] == revision + modified[block_id] and after[block_id][1] == ordinal
    announce_all(run.collect_events())


@pytest.mark.rule("P3")
@pytest.mark.rule("P4")
@pytest.mark.rule("P6")
@pytest.mark.rule("P8")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_proposals_end_in_typed_outcomes(data: st.DataObject) -> None:
    run = new_run()
    existing = [commit_one(run, body).block_id for body in EXISTING_BODIES]
    run.collect_events()
    arguments = data.draw(st.one_of(
        block_strategy(existing),
        st.fixed_dictionaries({"blocks": st.lists(block_strategy(existing) | json_any, max_size=4)}),
        st.fixed_dictionaries({"blocks": json_any}),
    ))
    as_json = data.draw(st.booleans())
    raw = json.dumps(arguments, ensure_ascii=True) if as_json else arguments
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id="call-fuzz", sealed=True, arguments=raw)
    result = intake(message)
    assert isinstance(result, (Candidate, IntakeRefusal))
    if isinstance(result, IntakeRefusal):
        return
    before = snapshot_of(run)
    decisions = run.settle(result, registry())
    assert len(decisions) == len(result.blocks)
    for decision in decisions:
        event(type(decision).__name__ + ":" + getattr(decision, "reason", ""))
    assert_typed(decisions, before, run)


@pytest.mark.rule("P5")
@pytest.mark.rule("P4")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bodies_up_to_two_megabytes(seed: int) -> None:
    rng = random.Random(seed)
    size = 2 * 1024 * 1024
    parts: list[str] = []
    total = 0
    while total < size:
        piece = rng.choice(FRAGMENTS) if rng.random() < 0.3 else "".join(rng.choice("abc xyz\n") for _ in range(rng.randint(1, 200)))
        parts.append(piece)
        total += len(piece)
    body = "".join(parts)
    run = new_run()
    existing = commit_one(run, "committed before").block_id
    before = snapshot_of(run)
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id=f"call-big-{seed}", sealed=True,
                         arguments={"blocks": [{"markdown": body}, {"markdown": body, "replaces": existing}]})
    result = intake(message, envelope_size=len(body.encode("utf-8", "surrogatepass")))
    assert isinstance(result, IntakeRefusal) and result.reason == "oversized_envelope"
    candidate = intake(message)  # settlement must cope even if a body got past the cap
    assert isinstance(candidate, Candidate)
    decisions = run.settle(candidate, registry())
    assert_typed(decisions, before, run)
    for decision in decisions:
        if isinstance(decision, Commit):
            assert decision.block.truncated and decision.block.content.markdown.endswith(TRUNCATION_MARKER)

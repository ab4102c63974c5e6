"""P1–P3: candidates, their identity, and what intake refuses."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import RUN, UNGRANTED_PRIVATE, candidate, new_run, part, registry, text_candidate

from imprint.contracts.registry import TRANSPORT_CAP_BYTES
from imprint.contracts.runtime import (
    AnswerPart,
    AnswerText,
    ModelFrame,
    ModelReasoning,
    RouterResult,
    RunStarted,
)
from imprint.publication import Candidate, Commit, IntakeRefusal, Rejected, announce_all, intake
from imprint.publication.candidate import candidate_id_for

ANSWER_LIKE = "Final answer: the fund holds 12.5% bonds [[cite:src:public:annual-report-2024]]."


@pytest.mark.rule("P1")
def test_tool_and_text_entries_get_origin_identities() -> None:
    tool = intake(part(tool_call_id="call_abc", markdown="x"))
    text = intake(AnswerText(run_id=RUN, turn_id="turn-7", segment=2, text="x"))
    assert isinstance(tool, Candidate) and tool.candidate_id == "tool:call_abc" and tool.entry == "tool"
    assert isinstance(text, Candidate) and text.candidate_id == "text:turn-7:2" and text.entry == "text"


@pytest.mark.rule("P1")
def test_redelivered_message_is_the_same_candidate() -> None:
    first = part(tool_call_id="call_abc", markdown="x")
    again = first.model_copy(update={"event_id": __import__("uuid").uuid4()})
    one, two = intake(first), intake(again)
    assert isinstance(one, Candidate) and isinstance(two, Candidate)
    assert one.candidate_id == two.candidate_id
    t1 = intake(AnswerText(run_id=RUN, turn_id="t", segment=0, text="a"))
    t2 = intake(AnswerText(run_id=RUN, turn_id="t", segment=0, text="a"))
    assert t1.candidate_id == t2.candidate_id  # type: ignore[union-attr]


@pytest.mark.rule("P1")
def test_overlong_origin_ids_are_digested_stably() -> None:
    long_id = "c" * 400
    one = candidate_id_for("tool", long_id)
    assert one == candidate_id_for("tool", long_id)
    assert one.startswith("tool:~") and len(one) <= 200
    assert one != candidate_id_for("tool", long_id + "x")


@pytest.mark.rule("P1")
def test_both_entries_go_through_the_same_checks() -> None:
    body = f"Relies on [[cite:{UNGRANTED_PRIVATE}]]"
    via_text = new_run().settle(text_candidate(body), registry())
    via_tool = new_run().settle(candidate(markdown=body), registry())
    assert [type(d) for d in via_text] == [type(d) for d in via_tool] == [Rejected]
    assert via_text[0].reason == via_tool[0].reason == "unauthorized_source"  # type: ignore[union-attr]
    ok_text = new_run().settle(text_candidate("plain text"), registry())
    assert isinstance(ok_text[0], Commit) and ok_text[0].block.candidate_id == "text:turn-1:0"


@pytest.mark.rule("P2")
@pytest.mark.parametrize(
    "message",
    [
        ModelFrame(run_id=RUN, payload={"choices": [{"delta": {"content": ANSWER_LIKE}}]}),
        ModelReasoning(run_id=RUN, text=ANSWER_LIKE),
        RouterResult(run_id=RUN, route="answer", payload=ANSWER_LIKE),
        RunStarted(run_id=RUN),
    ],
    ids=["frame", "reasoning", "router", "lifecycle"],
)
def test_non_answers_never_become_candidates(message: object) -> None:
    refusal = intake(message)
    assert isinstance(refusal, IntakeRefusal)
    assert refusal.reason == "not_an_answer" and refusal.run_id == RUN


@pytest.mark.rule("P2")
def test_unsealed_arguments_are_refused_however_answer_like() -> None:
    refusal = intake(part(tool_call_id="call_1", sealed=False, markdown=ANSWER_LIKE))
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "unsealed_arguments"
    assert refusal.candidate_id == "tool:call_1"


@pytest.mark.rule("P2")
def test_refusal_is_recorded_and_never_reaches_a_client() -> None:
    run = new_run()
    refusal = intake(ModelReasoning(run_id=RUN, text=ANSWER_LIKE))
    assert isinstance(refusal, IntakeRefusal)
    run.refuse_candidate(refusal)
    events = run.collect_events()
    assert [type(e).__name__ for e in events] == ["CandidateRefused"]
    assert events[0].reason == "not_an_answer"
    assert announce_all(events) == []
    assert run.live_blocks() == []


@pytest.mark.rule("P2")
def test_refused_unsealed_call_does_not_block_its_sealed_delivery() -> None:
    run = new_run()
    refusal = intake(part(tool_call_id="call_9", sealed=False, markdown="draft"))
    run.refuse_candidate(refusal)  # type: ignore[arg-type]
    assert run.settled("tool:call_9") is None
    decisions = run.settle(candidate(tool_call_id="call_9", markdown="sealed body"), registry())
    assert isinstance(decisions[0], Commit)


@pytest.mark.rule("P3")
@pytest.mark.parametrize("tool_call_id", [None, "", "   "])
def test_missing_tool_identity_is_refused(tool_call_id: str | None) -> None:
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id=tool_call_id, sealed=True, arguments={"markdown": "x"})
    refusal = intake(message)
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "missing_tool_identity"


@pytest.mark.rule("P3")
def test_tool_identity_with_control_characters_is_refused() -> None:
    refusal = intake(part(tool_call_id="call\x00evil", markdown="x"))
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "invalid_tool_identity"


@pytest.mark.rule("P3")
@pytest.mark.parametrize("raw", ['{"markdown": "unterminated', "not json", "", '{"a":' * 5000])
def test_unparseable_arguments_are_refused(raw: str) -> None:
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=raw)
    refusal = intake(message)
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "unparseable_arguments"


@pytest.mark.rule("P3")
@pytest.mark.parametrize("raw", ["[1, 2]", '"just a string"', "42", "null"])
def test_arguments_that_are_not_an_object_are_refused(raw: str) -> None:
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=raw)
    refusal = intake(message)
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "unparseable_arguments"


@pytest.mark.rule("P3")
def test_envelope_over_the_transport_cap_is_refused() -> None:
    message = part(markdown="x")
    assert isinstance(intake(message, envelope_size=TRANSPORT_CAP_BYTES), Candidate)
    refusal = intake(message, envelope_size=TRANSPORT_CAP_BYTES + 1)
    assert isinstance(refusal, IntakeRefusal) and refusal.reason == "oversized_envelope"
    text = AnswerText(run_id=RUN, turn_id="t", segment=0, text="x")
    assert intake(text, envelope_size=TRANSPORT_CAP_BYTES + 1).reason == "oversized_envelope"  # type: ignore[union-attr]


@pytest.mark.rule("P3")
def test_json_string_arguments_are_parsed() -> None:
    raw = json.dumps({"markdown": "hello", "replaces": None})
    result = intake(AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=raw))
    assert isinstance(result, Candidate) and result.blocks[0].markdown == "hello"


@pytest.mark.rule("P3")
@pytest.mark.parametrize(
    "arguments",
    [
        {"markdown": "revise", "replaces": "blk_not_issued"},
        {"markdown": "revise", "replaces": 123},
        {"markdown": "bell\x07 and nul\x00 inside"},
        {"markdown": "x" * 70_000},
        {"markdown": "x", "display": "not a dict", "role": ["nope"], "depends_on": "blk_x"},
    ],
    ids=["invalid-target", "non-string-target", "control-chars", "over-display-limit", "bad-metadata"],
)
def test_the_entry_does_not_veto_the_body(arguments: dict) -> None:
    result = intake(AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=arguments))
    assert isinstance(result, Candidate)
    result_from_json = intake(
        AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=json.dumps(arguments))
    )
    assert isinstance(result_from_json, Candidate)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@pytest.mark.rule("P3")
@settings(max_examples=150, deadline=None)
@given(arguments=st.dictionaries(
    st.sampled_from(["markdown", "replaces", "table", "role", "depends_on", "display", "blocks", "other"]),
    json_values,
    max_size=6,
))
def test_any_sealed_object_is_a_candidate(arguments: dict) -> None:
    message = AnswerPart(run_id=RUN, turn_id="t", tool_call_id="c", sealed=True, arguments=json.dumps(arguments))
    result = intake(message)
    assert isinstance(result, Candidate)
    assert len(result.blocks) >= 1
    assert [b.index for b in result.blocks] == list(range(len(result.blocks)))

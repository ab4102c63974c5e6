"""X9 — diagnostic traces are bounded and cannot carry question, answer, evidence body or provider envelope."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from journal_helpers import ACCOUNT, ANSWER, EXCERPT, QUESTION, completed, granted, published, to_running

from imprint.contracts.runtime import RunStage, ToolReceipt
from imprint.journal.diagnostics import MAX_ENTRIES, MAX_ENTRY_CHARS, DiagnosticEntry, DiagnosticRefused, DiagnosticTrace

ENVELOPE = json.dumps({"id": "chatcmpl-1", "choices": [{"message": {"content": "the answer"}}], "usage": {"total_tokens": 9}})


@pytest.mark.rule("X9")
def test_trace_is_bounded() -> None:
    trace = DiagnosticTrace()
    for i in range(10_000):
        trace.add("step", f"id-{i}", count=i, millis=1.5)
    lines = trace.render()
    assert len(lines) == MAX_ENTRIES == len(trace)
    assert lines[-1] == "trace.truncated n=9937"
    assert all(len(line) <= MAX_ENTRY_CHARS for line in lines)


@pytest.mark.rule("X9")
@pytest.mark.parametrize("text", [QUESTION, ANSWER, EXCERPT, ENVELOPE, "x" * 500, "line\nbreak", ""])
def test_private_text_cannot_enter_as_code_or_ref(text: str) -> None:
    with pytest.raises(DiagnosticRefused):
        DiagnosticEntry(text)
    with pytest.raises(DiagnosticRefused):
        DiagnosticEntry("ok", ref=text)


@pytest.mark.rule("X9")
@pytest.mark.parametrize(("count", "millis"), [("12", None), (None, "3ms"), (True, None), (1.5, None)])
def test_counts_and_timings_are_numbers_only(count, millis) -> None:
    with pytest.raises(DiagnosticRefused):
        DiagnosticEntry("ok", count=count, millis=millis)


@pytest.mark.rule("X9")
@given(st.text(min_size=1, max_size=300))
def test_anything_accepted_as_ref_is_a_single_bounded_token(text: str) -> None:
    try:
        entry = DiagnosticEntry("probe", ref=text)
    except DiagnosticRefused:
        return
    assert " " not in entry.ref and len(entry.ref) <= 120 and entry.ref.isascii()
    assert len(entry.render()) <= MAX_ENTRY_CHARS


@pytest.mark.rule("X9")
def test_execution_trace_holds_codes_and_ids_only(feed, journal, queries) -> None:
    feed(
        *to_running("r1"),
        RunStage(run_id="r1", stage="retrieval", detail="looking for " + QUESTION),
        granted("r1", "src-a"),
        published("r1", "tool:call-1", "blk-1"),
        ToolReceipt(run_id="r1", tool_call_id="call-1", status="ok"),
        completed("r1"),
    )
    trace = journal.execution("r1").trace
    rendered = "\n".join(trace.render())
    for private in (QUESTION, ANSWER, EXCERPT, "looking for", "secret-cond"):
        assert private not in rendered
    assert "stage ref=retrieval" in rendered and "effect.published ref=blk-1" in rendered and "receipt.ok ref=call-1" in rendered
    assert queries.execution("r1", ACCOUNT).diagnostics == trace.render()


@pytest.mark.rule("X9")
def test_execution_trace_stays_bounded_for_a_long_run(feed, journal) -> None:
    feed(*to_running("r1"))
    feed(*[RunStage(run_id="r1", stage=f"step-{i}") for i in range(300)])
    trace = journal.execution("r1").trace
    assert len(trace) == MAX_ENTRIES and trace.render()[-1].startswith("trace.truncated")


@pytest.mark.rule("X9")
def test_identifier_with_spaces_is_traced_without_its_ref(feed, journal) -> None:
    feed(*to_running("r1"), RunStage(run_id="r1", stage="a stage with spaces"))
    assert journal.execution("r1").trace.render()[-1] == "stage"

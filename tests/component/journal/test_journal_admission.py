"""X1 identity before answer; X3 conditions, QCS identity and the message binding."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from journal_helpers import ACCOUNT, OTHER, QUESTION, admitted, qcs, stored_payloads, to_running

from imprint.contracts.runtime import Condition
from imprint.journal.conditions import normalize_question
from imprint.journal.conversation import Conversation
from imprint.journal.execution import REQUEST_SCHEMA, AnswerExecution
from imprint.journal.lifecycle import State


@pytest.mark.rule("X1")
def test_admission_binds_the_exact_message_in_a_private_request_record(feed, journal) -> None:
    feed(admitted("r1", conversation_id="conv-1", message_id="msg-42"))
    ex = journal.execution("r1")
    req = ex.request
    assert (req.run_id, req.account_id, req.conversation_id, req.message_id) == ("r1", ACCOUNT, "conv-1", "msg-42")
    assert req.to_dict()["schema"] == REQUEST_SCHEMA
    assert req.question.startswith("esv1.") and req.conditions.startswith("esv1.")  # private: sealed only
    assert journal.sealer.open("conv-1", "r1", "request.question", req.question) == QUESTION
    # the request is the first fact after the execution was opened: nothing ran before it
    events = journal.events.get(ex.id)
    assert [type(e).__name__ for e in events][:2] == ["Opened", "Admitted"]


@pytest.mark.rule("X1")
def test_question_and_conditions_never_reach_the_log_in_plaintext(feed, journal) -> None:
    feed(admitted("r1", question="Is the Aurelia merger confidential?", qcs_set=qcs("q1", conditions=[Condition(name="deal", value="Project Aurelia")])))
    raw = stored_payloads(journal)
    assert b"Aurelia" not in raw and b"confidential" not in raw
    assert b"msg-r1" in raw  # identities are stored in the clear


@pytest.mark.rule("X1")
def test_binding_is_recorded_on_the_conversation(feed, journal) -> None:
    feed(admitted("r1", message_id="m1"), admitted("r2", message_id="m2"))
    conv = journal.conversation("conv-1")
    assert [(b.message_id, b.run_id) for b in conv.bindings] == [("m1", "r1"), ("m2", "r2")]
    assert conv.account_id == ACCOUNT


@pytest.mark.rule("X1")
def test_admission_into_another_accounts_conversation_is_refused(feed, journal) -> None:
    feed(admitted("r1"), admitted("r2", account_id=OTHER))
    ex = journal.execution("r2")
    assert not ex.admitted and [r.code for r in ex.refusals] == ["account_mismatch"]
    assert journal.conversation("conv-1").run_ids == ["r1"]


@pytest.mark.rule("X1")
def test_second_admission_of_the_same_run_is_refused(feed, journal) -> None:
    feed(admitted("r1", message_id="m1"), admitted("r1", message_id="m-other"))
    ex = journal.execution("r1")
    assert ex.request.message_id == "m1"
    assert [r.code for r in ex.refusals] == ["duplicate_admission"]


# -- X3 ---------------------------------------------------------------------------------------------


@pytest.mark.rule("X3")
@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("  What   is\tX?\n", "what is x?"),
        ("ＷＨＡＴ ｉｓ Ｘ？", "what is x?"),  # NFKC full-width
        ("Stra\u00dfe", "strasse"),  # casefold
        ("zero\u200bwidth", "zerowidth"),
        ("why?", "why?"),  # punctuation kept
    ],
)
def test_question_normalization(raw: str, normalized: str) -> None:
    assert normalize_question(raw) == normalized


@pytest.mark.rule("X3")
@given(st.text(max_size=80))
def test_normalization_is_idempotent(text: str) -> None:
    once = normalize_question(text)
    assert normalize_question(once) == once
    assert once == once.strip() and "  " not in once


@pytest.mark.rule("X3")
def test_execution_stores_normalized_question_qcs_sources_and_binding(feed, journal, queries) -> None:
    conditions = [Condition(name="period", value="Q3", source="user"), Condition(name="unit", value="EUR", source="default")]
    feed(admitted("r1", question="  What WAS  revenue? ", qcs_set=qcs("q1", conditions=conditions)))
    ex = journal.execution("r1")
    assert journal.sealer.open("conv-1", "r1", "request.normalized_question", ex.request.normalized_question) == "what was revenue?"
    assert ex.request.condition_sources == {"user": 1, "default": 1}
    view = queries.execution("r1", ACCOUNT)
    assert view.conditions == [c.model_dump() for c in conditions]
    assert (view.qcs_id, view.message_id, view.conversation_id) == ("q1", "msg-r1", "conv-1")


@pytest.mark.rule("X3")
def test_inheriting_the_previous_turn_creates_a_new_qcs_identity(feed, journal) -> None:
    feed(admitted("r1", qcs_set=qcs("q1")))
    inherited = [Condition(name="period", value="2024 Q3 secret-cond", source="inherited"), Condition(name="unit", value="EUR")]
    feed(admitted("r2", qcs_set=qcs("q2", inherits_from="q1", conditions=inherited)))
    ex2 = journal.execution("r2")
    assert ex2.admitted and ex2.request.qcs_id == "q2" and ex2.request.inherits_from == "q1"
    assert ex2.request.condition_sources == {"inherited": 1, "user": 1}
    assert journal.execution("r1").request.qcs_id == "q1"  # the parent keeps its own identity


@pytest.mark.rule("X3")
@pytest.mark.parametrize(
    ("second", "code"),
    [
        (lambda: admitted("r2", qcs_set=qcs("q1")), "qcs_reused"),
        (lambda: admitted("r2", qcs_set=qcs("q2", inherits_from="q2")), "qcs_self_inheritance"),
        (lambda: admitted("r2", qcs_set=qcs("q2", inherits_from="q-unknown")), "qcs_parent_unknown"),
        (lambda: admitted("r2", conversation_id="conv-2", qcs_set=qcs("q2", inherits_from="q1")), "qcs_cross_conversation"),
        (lambda: admitted("r2", qcs_set=qcs("q2", conditions=[Condition(name="a", value="b", source="inherited")])), "qcs_inherited_without_parent"),
    ],
    ids=["reuse", "self", "unknown-parent", "cross-conversation", "inherited-without-parent"],
)
def test_qcs_identity_violations_are_refused_and_recorded(feed, journal, second, code) -> None:
    feed(admitted("r1", qcs_set=qcs("q1")))
    feed(second())
    ex = journal.execution("r2")
    assert not ex.admitted and ex.state is None
    assert [(r.message_type, r.code) for r in ex.refusals] == [("run.admitted", code)]
    # a refused admission binds nothing and runs nothing
    for cid in ("conv-1", "conv-2"):
        conv = journal.conversation(cid)
        assert conv is None or "r2" not in conv.run_ids


@pytest.mark.rule("X3")
def test_refused_admission_keeps_no_private_text(feed, journal) -> None:
    feed(admitted("r1", qcs_set=qcs("q1")))
    feed(admitted("r2", question="Ultra secret refused question", conversation_id="conv-2", qcs_set=qcs("q2", inherits_from="q1")))
    assert b"Ultra secret" not in stored_payloads(journal)
    detail = journal.execution("r2").refusals[0].detail
    assert "secret" not in detail.lower()


@pytest.mark.rule("X3")
def test_redelivered_admission_with_same_qcs_is_not_a_reuse(feed, journal) -> None:
    msg = admitted("r1", qcs_set=qcs("q1"))
    feed(msg)
    feed(msg)
    feed(*to_running("r1")[1:])
    ex = journal.execution("r1")
    assert ex.state is State.RUNNING and ex.refusals == []


@pytest.mark.rule("X1")
def test_aggregates_are_found_by_natural_key(feed, journal) -> None:
    feed(admitted("r1"))
    assert isinstance(journal.repository.get(AnswerExecution.id_for("r1")), AnswerExecution)
    assert isinstance(journal.repository.get(Conversation.id_for("conv-1")), Conversation)
    assert json.loads(json.dumps(journal.execution("r1").request.to_dict()))["qcs"]["qcs_id"] == "qcs-r1"

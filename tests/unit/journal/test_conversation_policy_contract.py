"""X12 on the wire: the policy an admission carries, and where the conversation's facts and the
user's requests travel."""

from __future__ import annotations

import json

import pytest

from imprint.contracts.conversation import (
    CONVERSATION_FACTS,
    DEFAULT_POLICY,
    POLICIES,
    QuestionCancelRequested,
    QuestionQueued,
    QuestionSendNowRequested,
    RunEndedByPolicy,
    RunSteered,
)
from imprint.contracts.registry import decode, encode, topic_of
from imprint.contracts.runtime import QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic

pytestmark = pytest.mark.rule("X12")


def test_an_admission_from_before_the_policy_reads_as_the_default() -> None:
    admitted = RunAdmitted(run_id="r1", account_id="a", conversation_id="c", message_id="m", question="q",
                           qcs=QuestionConditionSet(qcs_id="q1"))
    old = json.loads(encode(admitted))
    del old["policy"]
    read = decode(Topic.RUNTIME, json.dumps(old).encode())
    assert read.policy is None, "no policy named: the deployment's default applies"
    assert DEFAULT_POLICY == "enqueue" and set(POLICIES) == {"concurrent", "reject", "enqueue", "interrupt",
                                                             "merge", "steer"}
    with pytest.raises(ValueError):
        RunAdmitted(run_id="r1", account_id="a", conversation_id="c", message_id="m", question="q",
                    qcs=QuestionConditionSet(qcs_id="q1"), policy="drop")  # type: ignore[arg-type]


def test_the_facts_go_on_the_runs_topic_in_their_conversations_order() -> None:
    for fact in CONVERSATION_FACTS:
        assert topic_of(fact.model_construct(type=fact.model_fields["type"].default)) is Topic.RUNS
    queued = QuestionQueued(conversation_id="c", account_id="a", run_id="r2", message_id="m2", sequence=2,
                            running=["r1"], queued=["r2"], policy="enqueue")
    assert queued.key == "c", "one conversation's facts share a partition: they keep their order"
    assert decode(Topic.RUNS, encode(queued)) == queued


def test_the_users_requests_and_a_steered_question_go_on_the_control_topic() -> None:
    cancel = QuestionCancelRequested(conversation_id="c", account_id="a", run_id="r2")
    now = QuestionSendNowRequested(conversation_id="c", account_id="a", run_id="r2")
    steered = RunSteered(run_id="r1", account_id="a", conversation_id="c", steered_run_id="r2", message_id="m2",
                         question="and in July?")
    ended = RunEndedByPolicy(run_id="r2", account_id="a", conversation_id="c", state="stopped", end="merged")
    assert {topic_of(m) for m in (cancel, now, steered, ended)} == {Topic.CONTROL}
    assert ended.key == "r2", "Publication hears it on the run's key"
    assert cancel.key == now.key == "c" and steered.key == "r1", "a steer travels with its run, as a stop does"

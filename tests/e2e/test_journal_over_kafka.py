"""The Runtime journal as a real process over Kafka: only accepted transitions reach
``imprint.runs.v1``; a contradictory terminal event is refused and recorded."""

from __future__ import annotations

import asyncio

import pytest

from imprint.contracts.runtime import QuestionConditionSet, RunAdmitted, RunCompleted, RunFailed, RunQueued, RunStarted
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.journal.application import open_journal
from tests.support.kafka import key_beside, produce, read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.mark.rule("X2")
def test_contradictory_terminal_events_are_refused_and_never_reach_the_runs_topic(isolated: Settings) -> None:
    run = "run-journal-x2"
    with Stack(isolated, parts=("journal",)):
        asyncio.run(produce(isolated, Topic.RUNTIME,
            RunAdmitted(run_id=run, account_id="a", conversation_id="c", message_id="m", question="q",
                        qcs=QuestionConditionSet(qcs_id="qcs-1")),
            RunQueued(run_id=run), RunStarted(run_id=run),
            RunCompleted(run_id=run, outcome="answered", answer_text="the answer"),
            RunCompleted(run_id=run, outcome="declined"),       # a second, different completion
            RunFailed(run_id=run, reason="late failure"),       # anything after the terminal
            RunStarted(run_id=run),
        ))
        marker = key_beside(isolated, run, "run-journal-marker")  # behind the run on its partition
        asyncio.run(produce(isolated, Topic.RUNTIME, RunAdmitted(
            run_id=marker, account_id="a", conversation_id="c2", message_id="m2", question="q",
            qcs=QuestionConditionSet(qcs_id="qcs-2"))))
        values = asyncio.run(read_topic(isolated, Topic.RUNS, until=lambda vs: any(v["run_id"] == marker for v in vs)))
    mine = [v for v in values if v["run_id"] == run]
    states = [v["state"] for v in mine if v["type"] == "run.transitioned"]
    assert states == ["admitted", "queued", "running", "completed"]
    closed = [v for v in mine if v["type"] == "run.closed"]
    assert len(closed) == 1 and closed[0]["outcome"] == "answered"

    journal = open_journal(isolated)
    try:
        execution = journal.execution(run)
        assert execution is not None
        assert len(execution.refusals) == 3, [r.code for r in execution.refusals]
    finally:
        journal.close()

"""Delivery killed mid-stream: a client that reconnects with its last id after the
restart gets every frame it lacks exactly once (D1), from the persisted view store."""

from __future__ import annotations

import asyncio

import pytest

from imprint.contracts.runtime import (
    AnswerPart,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunQueued,
    RunStarted,
)
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from imprint.delivery.summary import validate_stream
from services.delivery.auth import mint_token
from tests.support.kafka import produce
from tests.support.sse import read_frames
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.fault, pytest.mark.timeout(180)]


def part(run: str, call: str, markdown: str) -> AnswerPart:
    return AnswerPart(run_id=run, turn_id="t", tool_call_id=call, sealed=True, arguments={"markdown": markdown})


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
def test_a_client_resumes_after_delivery_is_killed_with_nothing_lost_or_repeated(isolated: Settings) -> None:
    run, account = "run-kill-delivery", "acct-k"
    token = mint_token(isolated, account)
    with Stack(isolated) as stack:
        asyncio.run(produce(isolated, Topic.RUNTIME,
            RunAdmitted(run_id=run, account_id=account, conversation_id="c", message_id="m", question="q",
                        qcs=QuestionConditionSet(qcs_id="qcs-k")),
            RunQueued(run_id=run), RunStarted(run_id=run),
            part(run, "c1", "First block."), part(run, "c2", "Second block.")))
        stack.wait_for_run(run, token)
        before = read_frames(stack.base_url, run, token,
                             until=lambda fs: sum(f.event == "answer-publication" for f in fs) >= 2)
        held = [f for f in before if f.id is not None]
        last = held[-1].id

        stack.kill("delivery")  # SIGKILL: no graceful shutdown, no flush
        asyncio.run(produce(isolated, Topic.RUNTIME,
            part(run, "c3", "Third block, written while Delivery was down."),
            RunCompleted(run_id=run, outcome="answered", answer_text="Done.")))
        stack.start("delivery")
        stack.wait_ready()

        after = read_frames(stack.base_url, run, token, last_event_id=last,
                            until=lambda fs: any(f.event == "done" for f in fs), timeout=60)
    resumed = [f for f in after if f.id is not None]
    ids = [f.id for f in held] + [f.id for f in resumed]
    assert resumed[0].id == last + 1, "no gap after the restart"
    assert ids == list(range(ids[0], ids[-1] + 1)), "every id exactly once across the kill"
    bodies = [f.json["block"]["content"]["markdown"] for f in resumed
              if f.event == "answer-publication" and f.json.get("block")]
    assert "Third block, written while Delivery was down." in bodies
    assert [f.data for f in after if f.event == "done"] == ["[DONE]"]
    check = validate_stream([(f.id, f.event, f.data if f.event == "done" else f.json) for f in held + resumed])
    assert not check.problems, check.problems  # D3: the summary matches the frames held across the kill

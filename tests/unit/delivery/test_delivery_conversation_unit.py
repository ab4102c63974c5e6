"""D9's pure rules: which messages become turns of a conversation stream and what a turn carries
(:mod:`imprint.delivery.conversation`), the fold every tab shows, and its AI SDK part."""

from __future__ import annotations

import json

import pytest

from imprint.delivery.conversation import TURN_EVENT, fold, of_fact
from imprint.delivery.frames import RunProjection
from imprint.delivery.handling import step
from imprint.delivery.ui_message_stream import conversation_part
from tests.support.delivery_builders import closed, fact, running, settled

CONV = "conv-u"
AT = "2026-01-01T00:00:00+00:00"


def entries(*turns: object) -> list[tuple[int, str, dict[str, object]]]:
    return [(i, TURN_EVENT, turn.payload(i, AT)) for i, turn in enumerate(turns, start=1)]  # type: ignore[attr-defined]


@pytest.mark.rule("D9")
@pytest.mark.rule("D6")
def test_a_journal_fact_is_a_turn_with_the_queue_after_it_and_no_frame_of_the_run() -> None:
    p = RunProjection.new("run-2")
    merged = fact("question_merged", "run-2", CONV, 4, running=["run-1"], queued=["run-3"], into_run_id="run-3",
                  question="A private question text.")
    result = step(p, merged)
    assert result.drafts == [], "a fact appends no frame of the run: its lifecycle has its own"
    assert result.turns == [of_fact(merged)]
    payload = result.turns[0].payload(9, AT)
    assert payload == {"entry_id": 9, "run_id": "run-2", "kind": "merged", "state": None, "message_id": "msg-run-2",
                       "policy": None, "reason": None, "by": "run-3", "end": None, "sequence": 4,
                       "running": ["run-1"], "queued": ["run-3"], "at": AT}
    assert "private" not in json.dumps(payload), "never a body (D6)"
    other = step(RunProjection.new("run-2"), fact("question_queued", "run-2", CONV, 1, account="acct-2"))
    assert step(p, fact("question_queued", "run-2", CONV, 1, account="acct-2")).turns == [], \
        "a fact naming another account than the run's is ignored"
    assert other.turns[0].kind == "queued"


@pytest.mark.rule("D9")
def test_a_runs_transitions_and_its_end_are_turns_of_its_conversation_once() -> None:
    p = RunProjection.new("run-1")
    assert [(t.kind, t.state) for t in step(p, running("run-1", conversation=CONV)).turns] == [("transition", "running")]
    step(p, settled("run-1"))
    assert [(t.kind, t.state) for t in step(p, closed("run-1", conversation=CONV)).turns] == [
        ("transition", "completed")], "an end whose transition was not heard is told by the closed record"
    lone = RunProjection.new("run-x")
    step(lone, running("run-x", conversation=CONV))
    assert step(lone, running("run-x", conversation=CONV, sequence=3)).turns == [], "a repeated transition: no turn"


@pytest.mark.rule("D9")
@pytest.mark.rule("X12")
def test_every_tab_folds_the_same_questions_and_queue_and_a_resumed_fold_repeats_nothing() -> None:
    turns = [of_fact(fact("question_started", "r1", CONV, 1, running=["r1"])),
             of_fact(fact("question_queued", "r2", CONV, 2, running=["r1"], queued=["r2"])),
             of_fact(fact("question_queued", "r3", CONV, 3, running=["r1"], queued=["r2", "r3"])),
             of_fact(fact("question_ended", "r3", CONV, 4, running=["r1"], queued=["r2"], end="cancelled",
                          state="stopped", reason="cancelled"))]
    whole = fold(entries(*turns))
    assert whole.queue == ["r2"] and whole.running == ["r1"] and whole.last_entry_id == 4
    assert [(q.run_id, q.kind, q.ended) for q in whole.questions] == [
        ("r1", "started", False), ("r2", "queued", False), ("r3", "ended", True)]
    resumed = fold(entries(*turns)[2:], fold(entries(*turns)[:3]))
    assert resumed == whole, "a tab that resumed after entry 3 shows what a tab that read it whole shows"
    assert fold(entries(*turns), whole) == whole, "entries at or below the last one held change nothing"


@pytest.mark.rule("D9")
def test_a_turn_is_a_data_part_replaced_by_its_run_and_a_notice_a_part_of_its_own() -> None:
    turn = of_fact(fact("question_queued", "r2", CONV, 2, running=["r1"], queued=["r2"])).payload(2, AT)
    assert conversation_part("turn", turn) == {"type": "data-turn", "id": "r2", "data": turn}
    notice = {"notice_id": 1, "kind": "withdrawn", "run_id": "r1", "block_id": "b1", "entry_id": 3}
    assert conversation_part("notice", notice) == {"type": "data-notice", "id": "r1:b1", "data": notice}

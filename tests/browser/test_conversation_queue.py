"""D9 in Chromium: two tabs of the reference page on one conversation (a real Delivery on each
store backend, real Kafka, real HTTP), fed the Journal's conversation facts (X12) as the
Journal announces them. A second question under ``enqueue`` appears queued in both tabs and
starts when the first answer ends, both tabs moving on to it; under ``interrupt`` the first
answer stops at a commit boundary keeping its committed blocks and the second follows; a
queued question cancelled in one tab (its request read back from the real control topic)
disappears from the other; "send now" publishes its request; a refresh shows the same queue."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.contracts.topics import Topic
from tests.integration.delivery.support import Delivery, off_thread
from tests.support.delivery_builders import closed, fact, preview, published, running, settled
from tests.support.kafka import read_topic

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

STATE = """() => ({
  run: window.imprintClient.runId,
  done: window.imprintClient.done,
  queue: Array.from(document.querySelectorAll('#queue li')).map(e => e.dataset.runId),
  questions: Array.from(document.querySelectorAll('#questions li')).map(e => [e.dataset.runId, e.dataset.kind]),
  earlier: Array.from(document.querySelectorAll('#earlier .earlier-answer')).map(e => [e.dataset.runId,
    Array.from(e.querySelectorAll('.block')).map(b => [b.dataset.blockId, b.dataset.status])]),
  blocks: Array.from(document.querySelectorAll('#blocks .block')).map(b => b.dataset.blockId),
})"""


def tabs(page: Any, delivery: Delivery, conversation: str, token: str) -> list[Any]:
    """Two tabs of the page on the conversation (its live question shown)."""
    second = page.context.new_page()
    second.set_default_timeout(15_000)
    second.errors = []
    second.on("pageerror", lambda error: second.errors.append(str(error)))
    pages = [page, second]
    for tab in pages:
        tab.goto(f"{delivery.url}/#conversation={conversation}&token={token}")
    return pages


def until(tab: Any, check: str, arg: Any = None) -> dict[str, Any]:
    """Wait until ``check`` (a JS predicate over the tab's state) holds; the state then."""
    tab.wait_for_function(f"(arg) => {{ const s = ({STATE})(); return ({check}); }}", arg=arg, timeout=20_000)
    return tab.evaluate(STATE)


@pytest.mark.rule("D9")
@pytest.mark.rule("X12")
@pytest.mark.rule("D1")
def test_two_tabs_show_the_queue_follow_the_next_answer_and_stay_in_step_across_cancel_and_refresh(
        page: Any, delivery: Delivery) -> None:
    conv, token = "conv-tabs", delivery.token()
    delivery.feeder.send(fact("question_started", "run-1", conv, 1, running=["run-1"]), running("run-1", conversation=conv),
                         published("run-1", "b1", 1, "First answer.", 1))
    both = tabs(page, delivery, conv, token)
    for tab in both:
        until(tab, "s.run === 'run-1' && s.blocks.join() === 'b1'")

    delivery.feeder.send(fact("question_queued", "run-2", conv, 2, running=["run-1"], queued=["run-2"]))
    for tab in both:
        until(tab, "s.queue.join() === 'run-2' && s.run === 'run-1'")  # queued in both, under the live answer

    delivery.feeder.send(settled("run-1"), closed("run-1", "First answer.", conversation=conv),
                         fact("question_ended", "run-1", conv, 3, queued=["run-2"], end="answered", state="completed"),
                         fact("question_started", "run-2", conv, 4, running=["run-2"]),
                         running("run-2", conversation=conv), published("run-2", "c1", 1, "Second answer.", 1))
    for tab in both:
        state = until(tab, "s.run === 'run-2' && s.queue.length === 0 && s.blocks.join() === 'c1'")
        assert state["earlier"] == [["run-1", [["b1", "saved"]]]], "the first answer stays above"

    # A third question waits; tab 0 cancels it, tab 1 sees it leave the queue.
    delivery.feeder.send(fact("question_queued", "run-3", conv, 5, running=["run-2"], queued=["run-3"]))
    for tab in both:
        until(tab, "s.queue.join() === 'run-3'")
    both[0].click("#queue li[data-run-id='run-3'] button.cancel-queued")
    control = off_thread(read_topic(delivery.settings, Topic.CONTROL,
                                    until=lambda vs: any(v["type"] == "question.cancel_requested" for v in vs)))
    request = next(v for v in control if v["type"] == "question.cancel_requested")
    assert (request["run_id"], request["conversation_id"]) == ("run-3", conv)
    delivery.feeder.send(fact("question_cancelled", "run-3", conv, 6, running=["run-2"],
                              request_id=request["event_id"]),
                         fact("question_ended", "run-3", conv, 7, running=["run-2"], end="cancelled", state="stopped",
                              reason="cancelled"))
    state = until(both[1], "s.queue.length === 0 && s.questions.some(q => q[0] === 'run-3' && q[1] === 'ended')")
    both[1].reload()
    refreshed = until(both[1], "s.run === 'run-2' && s.questions.length === 3")
    assert refreshed["queue"] == [] and refreshed["questions"] == state["questions"] == [
        ["run-1", "ended"], ["run-2", "started"], ["run-3", "ended"]], "a refresh shows the same conversation"
    assert not both[0].errors and not both[1].errors  # type: ignore[attr-defined]


@pytest.mark.rule("D9")
@pytest.mark.rule("X12")
@pytest.mark.rule("X11")
def test_under_interrupt_the_first_answer_stops_keeping_its_committed_blocks_and_send_now_is_a_request(
        page: Any, delivery: Delivery) -> None:
    conv, token = "conv-interrupt", delivery.token()
    delivery.feeder.send(fact("question_started", "run-a", conv, 1, running=["run-a"], policy="interrupt"),
                         running("run-a", conversation=conv), published("run-a", "b1", 1, "Kept block.", 1),
                         preview("run-a", "b2", 1, "Never saved.", 2))
    both = tabs(page, delivery, conv, token)
    for tab in both:
        until(tab, "s.run === 'run-a' && s.blocks.join() === 'b1,b2'")
    # A queued question the user sends now from tab 1: its request goes to the control topic.
    delivery.feeder.send(fact("question_queued", "run-b", conv, 2, running=["run-a"], queued=["run-b"]))
    until(both[1], "s.queue.join() === 'run-b'")
    both[1].click("#queue li[data-run-id='run-b'] button.send-now")
    off_thread(read_topic(delivery.settings, Topic.CONTROL,
                          until=lambda vs: [(v["type"], v["run_id"]) for v in vs] == [
                              ("question.send_now_requested", "run-b")]))
    # The Journal's answer: run-a interrupted by run-b, stopped at its commit boundary (X11).
    delivery.feeder.send(fact("question_sent_now", "run-b", conv, 3, running=["run-a"], queued=["run-b"],
                              request_id="8f0c3a52-5f4e-4a53-9bb3-5d25c8a1f0aa"),
                         fact("run_interrupted", "run-a", conv, 4, running=["run-a"], queued=["run-b"],
                              by_run_id="run-b"))
    delivery.feeder.send(settled("run-a", "stopped"), closed("run-a", None, conversation=conv, state="stopped"),
                         fact("question_ended", "run-a", conv, 5, queued=["run-b"], end="interrupted", state="stopped",
                              reason="interrupted"),
                         fact("question_started", "run-b", conv, 6, running=["run-b"]),
                         running("run-b", conversation=conv), published("run-b", "c1", 1, "The newer answer.", 1))
    for tab in both:
        state = until(tab, "s.run === 'run-b' && s.blocks.join() === 'c1'")
        assert state["earlier"] == [["run-a", [["b1", "saved"]]]], \
            "the interrupted answer keeps its committed block; its unsaved preview was dropped"
        assert ["run-a", "ended"] in state["questions"] and state["queue"] == []
        assert "interrupted" in tab.inner_text("#questions li[data-run-id='run-a']")
    assert not both[0].errors and not both[1].errors  # type: ignore[attr-defined]

"""D9 over real HTTP and stores: a conversation's stream carries its questions in order with
their states and its D7 notices, numbered per conversation; two readers fold the same thing;
resumed with ``Last-Event-ID`` it misses nothing and repeats nothing; another account's
conversation is 404 after the same wait (D6); the queue API refuses a question that is not
waiting with a typed 409."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from imprint.delivery.conversation import fold
from imprint.delivery.feeds import conversation_feed
from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, bearer, start_delivery
from imprint.contracts.topics import Topic
from tests.integration.delivery.support import off_thread
from tests.support.delivery_builders import closed, deleted, fact, published, running, settled, withdrawn
from tests.support.kafka import read_topic
from tests.support.sse import SSE, read_notices

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EVENTS = "/v1/conversations/{id}/events"
CONV = "conv-turns"


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 0.5,
                                                          "stream_open_wait_seconds": 0.1}))


def finished(run: str, *blocks: Any, account: str = "acct-1") -> list[Any]:
    return [running(run, account=account, conversation=CONV), *blocks, settled(run),
            closed(run, "Closed.", account=account, conversation=CONV)]


def entries(frames: list[SSE]) -> list[tuple[int, str, dict[str, Any]]]:
    return [(int(f.id or 0), f.event, f.json) for f in frames if f.event in ("turn", "notice")]


@pytest.mark.rule("D9")
@pytest.mark.rule("D1")
@pytest.mark.rule("D7")
def test_the_conversation_stream_carries_its_questions_in_order_and_its_notices(delivery: Delivery) -> None:
    token = delivery.token()
    delivery.feeder.send(*finished("run-t1", published("run-t1", "b1", 1, "One.", 1)))
    delivery.feeder.send(running("run-t2", conversation=CONV))
    first, _ = read_notices(delivery.url, CONV, token, path=EVENTS, until=lambda fs: len(entries(fs)) >= 3)
    assert [(i, e, d["run_id"], d["state"]) for i, e, d in entries(first)] == [
        (1, "turn", "run-t1", "running"), (2, "turn", "run-t1", "completed"), (3, "turn", "run-t2", "running")]
    view = fold(entries(first))
    assert [(q.run_id, q.state) for q in view.questions] == [("run-t1", "completed"), ("run-t2", "running")]

    delivery.feeder.send(withdrawn("run-t1", "b1", 1, "source_revoked"))  # after run-t1's done: a notice
    rest, _ = read_notices(delivery.url, CONV, token, path=EVENTS, last_event_id=3,
                           until=lambda fs: len(entries(fs)) >= 1)
    assert [(i, e, d["run_id"], d.get("block_id")) for i, e, d in entries(rest)] == [(4, "notice", "run-t1", "b1")]
    assert entries(rest)[0][2]["notice_id"] == 1, "the notice as the notices stream numbers it"
    again = fold(entries(rest), view)
    assert again.questions[0].notices[0]["block_id"] == "b1" and again.last_entry_id == 4
    whole, _ = read_notices(delivery.url, CONV, token, path=EVENTS, until=lambda fs: len(entries(fs)) >= 4)
    assert entries(whole) == entries(first) + entries(rest), "a refresh replays the same entries, nothing lost"


@pytest.mark.rule("D9")
@pytest.mark.rule("D6")
def test_another_accounts_conversation_stream_and_queue_answer_404(delivery: Delivery) -> None:
    delivery.feeder.send(running("run-mine", conversation=CONV))
    other = delivery.token("acct-2")
    with httpx.Client(base_url=delivery.url, timeout=10) as http:
        assert http.get(EVENTS.format(id=CONV), headers=bearer(other)).status_code == 404
        assert http.get(f"/v1/ai-sdk/conversations/{CONV}/events", headers=bearer(other)).status_code == 404
        assert http.post(f"/v1/conversations/{CONV}/queue/run-mine/cancel", headers=bearer(other)).status_code == 404
        assert http.get(EVENTS.format(id="conv-nobody"), headers=bearer(delivery.token())).status_code == 404
        delivery.feeder.send(running("run-elsewhere", conversation="conv-elsewhere"))
        minted = http.post(f"/v1/conversations/{CONV}/stream-tickets", headers=bearer(delivery.token()))
        assert minted.status_code == 201, minted.text
        ticket = minted.json()["ticket"]
        assert minted.json()["events_url"] == f"/v1/conversations/{CONV}/events?ticket={ticket}"
        assert http.get(f"/v1/conversations/conv-elsewhere/events?ticket={ticket}").status_code == 401, \
            "a conversation's ticket opens its own streams only"
    frames, _ = read_notices(delivery.url, CONV, None, path=EVENTS, ticket=ticket, until=lambda fs: len(entries(fs)) >= 1)
    assert entries(frames)[0][2]["run_id"] == "run-mine", "the ticket opens the conversation stream"


@pytest.mark.rule("D9")
@pytest.mark.rule("X12")
def test_the_queue_the_journal_announces_is_the_queue_every_reader_folds_and_the_api_acts_on(
        delivery: Delivery) -> None:
    """Turns from the Journal's facts: r2 and r3 wait behind r1; the user cancels r3 and sends r2
    now (each a control message on the real broker); once r2 started both are refused (409)."""
    token = delivery.token()
    delivery.feeder.send(fact("question_started", "run-q1", CONV, 1, running=["run-q1"]),
                         running("run-q1", conversation=CONV))
    delivery.feeder.send(fact("question_queued", "run-q2", CONV, 2, running=["run-q1"], queued=["run-q2"]),
                         fact("question_queued", "run-q3", CONV, 3, running=["run-q1"], queued=["run-q2", "run-q3"]))
    tabs = [read_notices(delivery.url, CONV, token, path=EVENTS, until=lambda fs: len(entries(fs)) >= 4)[0]
            for _ in range(2)]
    assert entries(tabs[0]) == entries(tabs[1]), "every tab reads the same entries"
    view = fold(entries(tabs[0]))
    assert view.queue == ["run-q2", "run-q3"] and view.running == ["run-q1"]
    assert [(q.run_id, q.kind, q.state, q.policy) for q in view.questions] == [
        ("run-q1", "started", "running", "enqueue"), ("run-q2", "queued", None, "enqueue"),
        ("run-q3", "queued", None, "enqueue")]
    with httpx.Client(base_url=delivery.url, timeout=10, headers=bearer(token)) as http:
        cancel = http.post(f"/v1/conversations/{CONV}/queue/run-q3/cancel")
        now = http.post(f"/v1/conversations/{CONV}/queue/run-q2/send-now")
        assert (cancel.status_code, cancel.json()["requested"]) == (202, "cancel"), cancel.text
        assert (now.status_code, now.json()["requested"]) == (202, "send_now"), now.text
        control = off_thread(read_topic(delivery.settings, Topic.CONTROL, until=lambda vs: len(vs) >= 2))
        assert sorted((v["type"], v["run_id"], v["conversation_id"], v["account_id"]) for v in control) == [
            ("question.cancel_requested", "run-q3", CONV, "acct-1"),
            ("question.send_now_requested", "run-q2", CONV, "acct-1")]
        # What the Journal records of them, announced: r3 cancelled, r1 interrupted by r2, r2 started.
        delivery.feeder.send(
            fact("question_cancelled", "run-q3", CONV, 4, running=["run-q1"], queued=["run-q2"]),
            fact("question_ended", "run-q3", CONV, 5, running=["run-q1"], queued=["run-q2"], end="cancelled",
                 state="stopped", reason="cancelled"),
            fact("question_sent_now", "run-q2", CONV, 6, running=["run-q1"], queued=["run-q2"]),
            fact("run_interrupted", "run-q1", CONV, 7, running=["run-q1"], queued=["run-q2"], by_run_id="run-q2"),
            fact("question_ended", "run-q1", CONV, 8, queued=["run-q2"], end="interrupted", state="stopped",
                 reason="interrupted"),
            fact("question_started", "run-q2", CONV, 9, running=["run-q2"]))
        later = fold(entries(read_notices(delivery.url, CONV, token, path=EVENTS,
                                          until=lambda fs: len(entries(fs)) >= 10)[0]))
        assert later.queue == [] and later.running == ["run-q2"]
        assert [(q.run_id, q.kind, q.end, q.by) for q in later.questions] == [
            ("run-q1", "ended", "interrupted", "run-q2"), ("run-q2", "started", None, None),
            ("run-q3", "ended", "cancelled", None)]
        for run, action in (("run-q2", "cancel"), ("run-q3", "send-now")):
            refused = http.post(f"/v1/conversations/{CONV}/queue/{run}/{action}")
            assert refused.status_code == 409 and refused.json()["error"] == "question_started", refused.text
    assert [m.type for m in delivery.publish.sent] == ["question.cancel_requested", "question.send_now_requested"], \
        "a refused request publishes nothing"


@pytest.mark.rule("D9")
def test_the_queue_api_refuses_a_question_that_is_not_waiting_with_a_typed_409(delivery: Delivery) -> None:
    delivery.feeder.send(running("run-live", conversation=CONV))
    with httpx.Client(base_url=delivery.url, timeout=10, headers=bearer(delivery.token())) as http:
        for action in ("cancel", "send-now"):
            answer = http.post(f"/v1/conversations/{CONV}/queue/run-live/{action}")
            assert answer.status_code == 409, answer.text
            assert answer.json() == {"error": "question_started", "run_id": "run-live", "state": "running",
                                     "detail": "the question is no longer waiting for its turn"}
        unknown = http.post(f"/v1/conversations/{CONV}/queue/run-nope/cancel")
        assert unknown.status_code == 409 and unknown.json()["error"] == "question_unknown"


@pytest.mark.rule("D9")
@pytest.mark.rule("X8")
def test_a_deleted_conversations_stream_ends_and_takes_no_more_entries(delivery: Delivery) -> None:
    token = delivery.token()
    delivery.feeder.send(fact("question_started", "run-d1", CONV, 1, running=["run-d1"]),
                         running("run-d1", conversation=CONV))
    with ThreadPoolExecutor(max_workers=1) as pool:
        reading = pool.submit(read_notices, delivery.url, CONV, token, path=EVENTS, timeout=30)
        deadline = time.monotonic() + 20
        while conversation_feed(CONV) not in delivery.notifier.feeds:  # the stream follows the feed live
            assert time.monotonic() < deadline and not reading.done(), "the stream never followed its feed"
            time.sleep(0.02)
        delivery.feeder.send(deleted("run-d1", conversation=CONV))
        frames, ended = reading.result(30)
    assert ended and [(i, d["kind"]) for i, _, d in entries(frames)] == [(1, "started"), (2, "transition")], \
        "the stream ends once the conversation is deleted"
    with httpx.Client(base_url=delivery.url, timeout=10) as http:
        assert http.get(EVENTS.format(id=CONV), headers=bearer(token)).status_code == 404
    delivery.feeder.send(fact("question_ended", "run-d1", CONV, 2, end="stopped", state="stopped"))
    assert delivery.store.conversation_view(CONV).last_entry_id == 2, "a deleted conversation takes no more entries"

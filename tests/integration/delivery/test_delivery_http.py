"""Delivery over real PostgreSQL, real Kafka and real HTTP (uvicorn, httpx streaming).
The store is fed through ``process()`` with Inbound records, as the consumer does."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from imprint.contracts.topics import Topic
from imprint.delivery.summary import validate_stream
from services.delivery.view_store import ViewStore
from tests.integration.delivery.support import Delivery, start_delivery
from tests.integration.delivery.support import SSE, read_stream
from tests.support.kafka import read_topic
from tests.support.delivery_builders import (
    closed,
    deleted,
    preview,
    published,
    rejected,
    running,
    settled,
    withdrawn,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def held(frames: list[SSE]) -> list[tuple[int, str, object]]:
    return [(f.id, f.event, f.data if f.event == "done" else f.json) for f in frames]  # type: ignore[misc]


def later(delay: float, action) -> threading.Thread:  # type: ignore[no-untyped-def]
    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def messages(delivery: Delivery, topic: Topic, until, timeout: float = 30.0) -> list[dict]:  # type: ignore[no-untyped-def]
    return asyncio.run(read_topic(delivery.settings, topic, until=until, timeout=timeout))


@pytest.mark.rule("D1")
def test_resume_with_last_event_id_has_no_gap_and_no_duplicate(delivery: Delivery) -> None:
    run, token = "run-resume", delivery.token()
    delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"block {i}", i) for i in range(1, 6)])
    first, ended = read_stream(delivery.url, run, token, until=lambda fs: len(fs) >= 3)
    assert not ended and [f.id for f in first] == [1, 2, 3]

    later(0.5, lambda: delivery.feeder.send(published(run, "b6", 1, "live block", 6), settled(run), closed(run, "done text")))
    second, ended = read_stream(delivery.url, run, token, last_event_id=3)
    assert ended, "the server ends the stream after done"
    ids = [f.id for f in first] + [f.id for f in second]
    assert ids == list(range(1, ids[-1] + 1)), "no gap, no duplicate across the reconnect"
    assert validate_stream(held(first + second)).ok

    # the query-string form resumes the same way
    third, _ = read_stream(delivery.url, run, token, last_event_id=ids[-3], via_query=True)
    assert [f.id for f in third] == ids[-2:]


@pytest.mark.rule("D1")
@pytest.mark.rule("P16")
@pytest.mark.rule("P21")
def test_a_new_client_first_gets_the_current_merged_view(delivery: Delivery) -> None:
    run, token = "run-merged", delivery.token()
    delivery.feeder.send(
        running(run),
        preview(run, "b1", 1, "draft of one", candidate="c1"),
        published(run, "b1", 1, "draft of one", candidate="c1", source_hint="sources_verified"),
        preview(run, "b1", 2, "one, revised", candidate="c2"),
        published(run, "b2", 1, "excerpt of a private report", 2),
        withdrawn(run, "b2", 1, "source_revoked", source_id="src-private-7"),
        published(run, "b3", 1, "three", 3),
    )
    last = delivery.store.run(run).last_frame_id  # type: ignore[union-attr]
    frames, _ = read_stream(delivery.url, run, token, until=lambda fs: fs[-1].id == last)
    shown = {}
    for f in frames:
        data = f.json
        if "block" in data:
            shown[data["block_id"]] = data["block"]
    assert shown["b1"]["revision"] == 2 and shown["b1"]["status"] == "unsaved", "newer preview, marked unsaved"
    assert shown["b2"] is None and shown["b3"]["status"] == "saved"
    raw = json.dumps([f.data for f in frames])
    assert "private report" not in raw and "src-private-7" not in raw and "draft of one" not in raw
    answer = httpx.get(f"{delivery.url}/v1/runs/{run}/answer", headers={"Authorization": f"Bearer {token}"}).json()
    assert [(b["block_id"], b["revision"], b["status"]) for b in answer["blocks"]] == \
        [("b1", 2, "unsaved"), ("b3", 1, "saved")]


@pytest.mark.rule("D6")
def test_isolation_401_and_404(delivery: Delivery) -> None:
    run = "run-isolated"
    delivery.feeder.send(running(run, account="acct-1"), published(run, "b1", 1, "mine"))
    url = f"{delivery.url}/v1/runs/{run}/events"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer garbage"}).status_code == 401
    expired = delivery.token(ttl=-10)
    assert httpx.get(url, headers={"Authorization": f"Bearer {expired}"}).status_code == 401
    other = {"Authorization": f"Bearer {delivery.token('acct-2')}"}
    foreign = httpx.get(url, headers=other)
    missing = httpx.get(f"{delivery.url}/v1/runs/run-does-not-exist/events", headers=other)
    assert foreign.status_code == missing.status_code == 404 and foreign.json() == missing.json()
    assert httpx.get(f"{delivery.url}/v1/runs/{run}/answer", headers=other).status_code == 404


@pytest.mark.rule("D6")
@pytest.mark.rule("P8")
def test_rejections_and_withdrawals_reach_the_client_without_revealing_the_source(delivery: Delivery) -> None:
    run, token = "run-safe", delivery.token()
    delivery.feeder.send(
        running(run), published(run, "b1", 1, "fine"),
        rejected(run, "tool:c9", block_index=1),
        withdrawn(run, "b1", 1, "source_tombstoned", source_id="src-secret-42"),
        settled(run), closed(run, "ok"),
    )
    frames, ended = read_stream(delivery.url, run, token)
    assert ended
    rejection = next(f.json for f in frames if f.event == "answer-rejected")
    assert rejection["reason"] == "not_publishable"
    withdrawal = next(f.json for f in frames if f.event == "answer-withdrawn")
    assert withdrawal["block"] is None and withdrawal["cause"] == "source_tombstoned"
    raw = "".join(f.data for f in frames)
    assert "src-secret-42" not in raw and "unauthorized_source" not in raw


@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
def test_completed_only_after_done_and_interrupted_when_the_client_drops(delivery: Delivery) -> None:
    token = delivery.token()
    auth = {"Authorization": f"Bearer {token}"}
    delivery.feeder.send(running("run-cut"), published("run-cut", "b1", 1, "partial"),
                         running("run-full"), published("run-full", "b1", 1, "whole"),
                         settled("run-full"), closed("run-full", "The full answer."))
    # D5: completed but nobody received it yet: not shown as complete, outcome kept
    before = httpx.get(f"{delivery.url}/v1/runs/run-full", headers=auth).json()
    assert (before["display"], before["complete"], before["outcome"]) == ("delivery_pending", False, "answered")

    cut, ended = read_stream(delivery.url, "run-cut", token, until=lambda fs: len(fs) >= 2)
    assert not ended
    full, ended = read_stream(delivery.url, "run-full", token)
    assert ended and full[-1].event == "done"

    values = messages(delivery, Topic.DELIVERY, lambda vs: {("run-cut", "delivery.interrupted"),
                                                            ("run-full", "delivery.completed")}
                      <= {(v["run_id"], v["type"]) for v in vs})
    by_run = {run: [v["type"] for v in values if v["run_id"] == run] for run in ("run-cut", "run-full")}
    assert "delivery.completed" not in by_run["run-cut"]
    assert "delivery.interrupted" not in by_run["run-full"]
    completed = next(v for v in values if v["type"] == "delivery.completed")
    assert completed["last_event_id"] == full[-1].id and completed["frame_count"] == len(full)
    assert "client.received" not in by_run["run-full"], "sent is not received"

    after = httpx.get(f"{delivery.url}/v1/runs/run-full", headers=auth).json()
    assert (after["display"], after["complete"]) == ("complete", True)
    # a completed execution whose delivery was interrupted is shown conservatively
    delivery.feeder.send(settled("run-cut"), closed("run-cut", "Closed while the client was away."))
    cut_view = httpx.get(f"{delivery.url}/v1/runs/run-cut", headers=auth).json()
    assert (cut_view["display"], cut_view["complete"], cut_view["outcome"]) == \
        ("delivery_interrupted", False, "answered")
    history = httpx.get(f"{delivery.url}/v1/conversations/conv-run-cut/history", headers=auth).json()
    assert history["runs"][0]["answer_text"] is None and history["runs"][0]["blocks"][0]["block_id"] == "b1"


@pytest.mark.rule("D4")
def test_receipts_are_published_on_the_delivery_topic(delivery: Delivery) -> None:
    run, token = "run-receipts", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "v1"))
    headers = {"Authorization": f"Bearer {token}"}
    for kind in ("client.received", "client.rendered"):
        response = httpx.post(f"{delivery.url}/v1/runs/{run}/receipts", headers=headers,
                              json={"type": kind, "last_event_id": 2, "block_ids": ["b1"]})
        assert response.status_code == 202
    values = messages(delivery, Topic.DELIVERY, lambda vs: len(vs) >= 2)
    assert [(v["type"], v["account_id"], v["last_event_id"], v["block_ids"]) for v in values] == [
        ("client.received", "acct-1", 2, ["b1"]), ("client.rendered", "acct-1", 2, ["b1"])]


@pytest.mark.rule("D2")
def test_cancel_publishes_and_a_dropped_connection_does_not(delivery: Delivery) -> None:
    run, token = "run-cancel", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "v1"))
    read_stream(delivery.url, run, token, until=lambda fs: len(fs) >= 1)  # drop mid-stream
    messages(delivery, Topic.DELIVERY, lambda vs: any(v["type"] == "delivery.interrupted" for v in vs))
    response = httpx.post(f"{delivery.url}/v1/runs/{run}/cancel", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 202
    control = messages(delivery, Topic.CONTROL, lambda vs: len(vs) >= 1)
    time.sleep(1.0)
    control = messages(delivery, Topic.CONTROL, lambda vs: len(vs) >= len(control))
    assert [(v["type"], v["run_id"], v["account_id"]) for v in control] == \
        [("run.cancel_requested", run, "acct-1")], "exactly one cancel: the explicit one"


@pytest.mark.rule("D2")
@pytest.mark.rule("D3")
def test_content_only_after_the_closed_record_in_chunks_of_28_and_done_once_last(delivery: Delivery) -> None:
    run, token = "run-content", delivery.token()
    text = "Water boils at 100 °C at sea level. 在高海拔地区沸点更低。 " * 4
    delivery.feeder.send(running(run), published(run, "b1", 1, "block"))
    comments: list[str] = []
    later(1.5, lambda: delivery.feeder.send(settled(run), closed(run, text)))
    frames, ended = read_stream(delivery.url, run, token, comments=comments)
    assert ended
    events = [f.event for f in frames]
    closed_status = next(i for i, f in enumerate(frames) if f.event == "run-status" and f.json.get("closed"))
    assert all(i > closed_status for i, e in enumerate(events) if e == "content")
    chunks = [f.json["text"] for f in frames if f.event == "content"]
    assert all(len(c) <= 28 for c in chunks) and "".join(chunks) == text
    assert events.count("done") == 1 and events[-1] == "done" and frames[-1].data == "[DONE]"
    assert events[-2] == "stream-summary"
    assert validate_stream(held(frames)).ok
    assert any(c.startswith(": keep-alive") for c in comments), "keep-alive comments while idle"


@pytest.mark.rule("D1")
def test_a_redelivered_batch_and_a_restarted_store_keep_frames_and_positions(delivery: Delivery) -> None:
    run = "run-restart"
    delivery.feeder.send(running(run), published(run, "b1", 1, "once"))
    batch = list(delivery.feeder.history)
    before = delivery.store.frames_after(run, 0)
    assert delivery.feeder.replay(batch) == []
    again = ViewStore(delivery.settings)
    try:
        assert again.frames_after(run, 0) == before
        assert again.process(batch) == []
        assert again.position(Topic.PUBLICATION.value, 0) == 0
    finally:
        again.close()


@pytest.mark.rule("X8")
def test_delete_is_requested_by_the_owner_and_deletion_purges_the_views(delivery: Delivery) -> None:
    run, token = "run-delete", delivery.token()
    headers = {"Authorization": f"Bearer {token}"}
    delivery.feeder.send(running(run, conversation="conv-del"), published(run, "b1", 1, "private words"))
    other = {"Authorization": f"Bearer {delivery.token('acct-2')}"}
    assert httpx.delete(f"{delivery.url}/v1/conversations/conv-del", headers=other).status_code == 404
    assert httpx.delete(f"{delivery.url}/v1/conversations/conv-del", headers=headers).status_code == 202
    control = messages(delivery, Topic.CONTROL, lambda vs: len(vs) >= 1)
    assert [(v["type"], v["conversation_id"], v["account_id"]) for v in control] == \
        [("conversation.delete_requested", "conv-del", "acct-1")]
    delivery.feeder.send(deleted(run, "conv-del"))
    assert httpx.get(f"{delivery.url}/v1/runs/{run}", headers=headers).status_code == 404
    assert httpx.get(f"{delivery.url}/v1/conversations/conv-del/history", headers=headers).status_code == 404
    assert "private words" not in json.dumps([f.data for f in delivery.store.frames_after(run, 0)])


@pytest.mark.rule("P17")
@pytest.mark.rule("D4")
def test_health_ready_and_metrics(delivery: Delivery) -> None:
    assert httpx.get(f"{delivery.url}/healthz").status_code == 200
    assert httpx.get(f"{delivery.url}/readyz").json()["ready"] is True
    run, token = "run-metrics", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "A"), published(run, "b1", 1, "B"), settled(run), closed(run))
    read_stream(delivery.url, run, token)
    text = httpx.get(f"{delivery.url}/metrics").text
    assert 'imprint_delivery_frames_sent_total{event="done"} 1.0' in text
    assert "imprint_delivery_conflicts_total 1.0" in text
    assert "imprint_delivery_completions_total 1.0" in text


@pytest.mark.rule("D2")
@pytest.mark.rule("D4")
def test_a_hopelessly_slow_client_is_dropped_not_the_process(isolated) -> None:  # type: ignore[no-untyped-def]
    settings = isolated.model_copy(update={"sse_client_queue": 2, "sse_keepalive_seconds": 60})
    for delivery in start_delivery(settings, slow_client_timeout=0.5):
        run, token = "run-slow", delivery.token()
        body = "x" * 50_000
        delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, body + str(i), i) for i in range(1, 400)])
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.stream("GET", f"{delivery.url}/v1/runs/{run}/events", headers=headers,
                          timeout=httpx.Timeout(30, connect=5)) as response:
            assert response.status_code == 200
            deadline = time.monotonic() + 30
            while "imprint_delivery_slow_clients_dropped_total 1.0" not in httpx.get(f"{delivery.url}/metrics").text:
                assert time.monotonic() < deadline, "the slow client was never dropped"
                time.sleep(0.2)
            assert httpx.get(f"{delivery.url}/healthz").status_code == 200, "the process keeps serving"
        values = messages(delivery, Topic.DELIVERY, lambda vs: any(v["type"] == "delivery.interrupted" for v in vs))
        assert not any(v["type"] == "delivery.completed" for v in values)

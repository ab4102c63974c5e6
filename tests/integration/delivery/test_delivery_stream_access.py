"""Opening a run's stream over real HTTP, PostgreSQL and Kafka: before Delivery knows
the run (a bounded wait, D6-neutral), with a stream ticket instead of a header (D6),
204 once a stream was read to its end (D1/D3), and the AI SDK UI message stream's
wire format (header, parts, ``[DONE]``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from imprint.delivery.ui_message_stream import message_id
from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, bearer, read_stream, start_delivery
from tests.support.delivery_builders import closed, published, running, settled, withdrawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = 3.0


@pytest.fixture
def waiting_delivery(isolated: Settings) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 0.5,
                                                          "stream_open_wait_seconds": WAIT}))


@pytest.mark.rule("D1")
@pytest.mark.rule("D6")
def test_a_stream_opened_before_the_run_is_known_waits_for_it(waiting_delivery: Delivery) -> None:
    delivery, run = waiting_delivery, "run-early"
    feeder = threading.Timer(1.0, lambda: delivery.feeder.send(running(run), published(run, "b1", 1, "Early.", 1),
                                                               settled(run), closed(run, "Closed.")))
    feeder.start()
    try:
        frames, ended = read_stream(delivery.url, run, delivery.token())  # asserts 200
    finally:
        feeder.join()
    assert ended and frames[-1].event == "done"
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))


@pytest.mark.rule("D6")
def test_a_run_that_never_appears_and_another_accounts_run_are_the_same_404_after_the_same_wait(
    waiting_delivery: Delivery,
) -> None:
    delivery = waiting_delivery
    delivery.feeder.send(running("run-theirs", account="acct-2"))
    token = delivery.token("acct-1")
    answers = []
    for run in ("run-never", "run-theirs"):
        started = time.monotonic()
        response = httpx.get(f"{delivery.url}/v1/runs/{run}/events", headers=bearer(token), timeout=WAIT + 10)
        answers.append((response.status_code, response.json(), time.monotonic() - started >= WAIT))
    assert answers[0] == answers[1] == (404, {"detail": "run not found"}, True)
    ui = httpx.get(f"{delivery.url}/v1/ai-sdk/runs/run-theirs/stream", headers=bearer(token), timeout=WAIT + 10)
    assert ui.status_code == 404


@pytest.mark.rule("D6")
def test_a_stream_ticket_opens_only_its_own_runs_streams(delivery: Delivery) -> None:
    run, other = "run-ticket", "run-ticket-other"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Mine.", 1), running(other))
    token = delivery.token()
    minted = httpx.post(f"{delivery.url}/v1/runs/{run}/stream-tickets", headers=bearer(token))
    assert minted.status_code == 201
    body = minted.json()
    ticket = body["ticket"]
    assert body["expires_in"] == delivery.settings.stream_ticket_ttl_seconds and len(ticket) >= 32
    assert httpx.post(f"{delivery.url}/v1/runs/{run}/stream-tickets").status_code == 401, "minting needs the bearer"
    foreign = httpx.post(f"{delivery.url}/v1/runs/{run}/stream-tickets", headers=bearer(delivery.token("acct-2")))
    assert foreign.status_code == 404

    def frames_with(url: str) -> list[str]:
        lines: list[str] = []
        with httpx.stream("GET", url, timeout=10) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                lines.append(line)
                if line.startswith("event: answer-publication"):
                    break
        return lines

    assert "event: answer-publication" in frames_with(f"{delivery.url}/v1/runs/{run}/events?ticket={ticket}")
    assert "event: answer-publication" in frames_with(f"{delivery.url}/v1/runs/{run}/events?ticket={ticket}"), (
        "a ticket keeps working for the browser's reconnects")
    assert httpx.get(f"{delivery.url}/v1/runs/{other}/events?ticket={ticket}").status_code == 401, "bound to its run"
    assert httpx.get(f"{delivery.url}/v1/runs/{run}/events?ticket=forged").status_code == 401
    assert httpx.get(f"{delivery.url}/v1/runs/{run}/answer?ticket={ticket}").status_code == 401, "streams only"
    assert httpx.post(f"{delivery.url}/v1/runs/{run}/cancel?ticket={ticket}").status_code == 401, "never a POST"


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D4")
def test_a_stream_read_to_its_end_answers_204_and_records_nothing(delivery: Delivery) -> None:
    run, token = "run-204", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "Only.", 1), settled(run), closed(run, "Closed."))
    frames, ended = read_stream(delivery.url, run, token)
    assert ended and frames[-1].event == "done"
    last = frames[-1].id
    # An id beyond the end is no longer 204: D8 starts it over (test_delivery_reset.py).
    for query, headers in (("", {"Last-Event-ID": str(last)}), (f"?last_event_id={last}", {})):
        again = httpx.get(f"{delivery.url}/v1/runs/{run}/events{query}", headers={**bearer(token), **headers})
        assert again.status_code == 204 and again.content == b""
    resumed, ended = read_stream(delivery.url, run, token, last_event_id=last - 1)
    assert ended and [f.event for f in resumed] == ["done"], "one frame short of the end still streams"
    def completions() -> int:
        return [m.type for m in delivery.publish.sent if getattr(m, "run_id", None) == run].count("delivery.completed")

    deadline = time.monotonic() + 10
    while completions() < 2 and time.monotonic() < deadline:  # recorded once each connection has ended
        time.sleep(0.05)
    assert completions() == 2, "each read to the end completed once; the 204s recorded nothing"


@pytest.mark.rule("D2")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
def test_the_ui_message_stream_wire_format(delivery: Delivery) -> None:
    run, token = "run-ui-wire", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "One.", 1), published(run, "b2", 1, "Two.", 2),
                         published(run, "b1", 2, "One, revised.", 1),
                         withdrawn(run, "b2", 1, "source_revoked", source_id="src-private-1"),
                         settled(run), closed(run, "x" * 60))
    response = httpx.get(f"{delivery.url}/v1/ai-sdk/runs/{run}/stream", headers=bearer(token), timeout=10)
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") and "\n" not in e for e in events), "one data line per event, nothing else"
    assert events[-1] == "data: [DONE]"
    parts = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert parts[0] == {"type": "start", "messageId": message_id(run),
                        "messageMetadata": {"run_id": run, "conversation_id": f"conv-{run}"}}
    assert parts[-1]["type"] == "finish" and set(parts[-1]) == {"type", "messageMetadata"}
    blocks = [(p["id"], p["data"]["state"], p["data"].get("markdown")) for p in parts if p["type"] == "data-block"]
    # a replay: b1's first frame was superseded, it holds b1's place until its newest frame
    assert blocks == [("b1", "superseded", None), ("b2", "superseded", None), ("b1", "committed", "One, revised."),
                      ("b2", "withdrawn", None)]
    deltas = [p["delta"] for p in parts if p["type"] == "text-delta"]
    assert "".join(deltas) == "x" * 60 and all(len(d) <= 28 for d in deltas)
    kinds = [p["type"] for p in parts]
    assert kinds.index("text-start") < kinds.index("text-delta") < kinds.index("text-end") < kinds.index("finish")

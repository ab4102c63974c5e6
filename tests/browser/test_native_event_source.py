"""The browser's own EventSource against Delivery: a stream ticket opens it without a
header, the browser reconnects by itself with Last-Event-ID after the connection is
dropped mid-run, and a stream read to its end answers 204 so the browser stops
(counted server-side: Delivery's own request counter)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from imprint.delivery.summary import validate_stream
from tests.integration.delivery.support import Delivery, KillableProxy
from tests.support.delivery_builders import closed, published, running, settled

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

EVENTS_ROUTE = "/v1/runs/{run_id}/events"
FRAME_KINDS = ["progress", "answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
               "run-status", "content", "evidence-summary", "error", "stream-summary", "done"]

OPEN = """([url, kinds]) => {
  window.seen = []; window.opens = 0; window.errors = 0;
  const source = new EventSource(url);
  window.source = source;
  source.onopen = () => { window.opens += 1; };
  source.onerror = () => { window.errors += 1; };
  for (const kind of kinds) source.addEventListener(kind, (e) => {
    if (e instanceof MessageEvent) window.seen.push({id: e.lastEventId, event: e.type, data: e.data});
  });
}"""


def stream_requests(delivery: Delivery, status: str | None = None) -> int:
    """GET requests of the SSE route that reached the server (by status, or all)."""
    registry = delivery.app.state.metrics.registry
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (sample.name == "imprint_delivery_http_requests_total" and labels.get("route") == EVENTS_ROUTE
                    and labels.get("method") == "GET" and (status is None or labels.get("status") == status)):
                total += sample.value
    return int(total)


def ticket(delivery: Delivery, run: str, token: str) -> str:
    response = httpx.post(f"{delivery.url}/v1/runs/{run}/stream-tickets", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    return response.json()["ticket"]


@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
@pytest.mark.rule("D3")
@pytest.mark.rule("D6")
def test_native_event_source_reconnects_with_last_event_id_and_stops_at_the_end(
    page: Any, delivery: Delivery, capfd: pytest.CaptureFixture[str],
) -> None:
    run, token = "run-b-native", delivery.token()
    proxy = KillableProxy(delivery.server.port)
    try:
        delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 4)])
        secret = ticket(delivery, run, token)
        base = f"http://127.0.0.1:{proxy.port}"
        page.goto(f"{base}/healthz")  # same origin as the stream
        page.evaluate(OPEN, [f"{base}/v1/runs/{run}/events?ticket={secret}", FRAME_KINDS])
        page.wait_for_function("() => window.seen.length >= 4")
        assert proxy.kill_all() >= 1, "the connection is dropped mid-run"
        delivery.feeder.send(*[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(4, 7)])
        delivery.feeder.send(settled(run), closed(run, "Six blocks, closed."))
        # done arrives, the server ends the response, the browser reconnects once with
        # Last-Event-ID = done's id, gets 204 and gives up (readyState CLOSED).
        page.wait_for_function("() => window.source.readyState === 2", timeout=30_000)
        seen = page.evaluate("() => window.seen")
        ids = [int(f["id"]) for f in seen]
        assert ids == list(range(1, len(ids) + 1)), "every frame id once, in order, across the reconnect"
        assert seen[-1]["event"] == "done" and seen[-1]["data"] == "[DONE]"
        check = validate_stream([(int(f["id"]), f["event"], f["data"] if f["event"] == "done" else json.loads(f["data"]))
                                 for f in seen])
        assert check.ok, check.problems
        assert page.evaluate("() => window.opens") >= 2 and proxy.accepted >= 2
        assert stream_requests(delivery, "204") == 1, "the reconnect after done was told to stop"
        after_done = stream_requests(delivery)
        time.sleep(5)  # more than twice the stream's retry (2 s): a reconnecting browser would be back by now
        assert stream_requests(delivery) == after_done, "no request reached the server after the 204"
        out, err = capfd.readouterr()
        assert "route=/v1/runs/{run_id}/events" in out + err, "the access log names the route"
        assert secret not in out + err, "the stream ticket is never logged"
    finally:
        proxy.close()


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
def test_the_reference_client_closes_its_event_source_on_done(page: Any, delivery: Delivery) -> None:
    run, token = "run-b-closes", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "Only block.", 1), settled(run), closed(run, "Closed."))
    page.goto(f"{delivery.url}/#run={run}&token={token}")
    page.wait_for_function("() => window.imprintClient && window.imprintClient.done")
    state = page.evaluate("""() => ({transport: window.imprintClient.transport, validated: window.imprintClient.validated,
        source: window.imprintClient.source, errors: window.imprintClient.errors})""")
    assert state == {"transport": "eventsource", "validated": True, "source": None, "errors": []}
    before = stream_requests(delivery)
    assert before == 1
    time.sleep(5)  # more than twice the stream's retry (2 s)
    assert stream_requests(delivery) == before, "after done no further request reaches the server"

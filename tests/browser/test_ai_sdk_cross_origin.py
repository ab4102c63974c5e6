"""IMPRINT_CORS_ORIGINS in Chromium: a front end served from another origin (a second
local HTTP server, its own port) runs the AI SDK's own client (``ai`` 5.x, 6.x, 7.x from
tests/node, unmodified, through an import map) against Delivery. Listed, the page reads
a run with every line, opens a stream with the ticket flow and the browser's own
EventSource, and resumes with Last-Event-ID. Not listed — another origin listed, or
none (the default) — the browser refuses the page every response and sends no request
that needs a preflight; the refusal is the browser's, not the test's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, start_delivery
from tests.support.ai_sdk_page import LINES, FrontEnd
from tests.support.delivery_builders import closed, published, running, settled, withdrawn

pytestmark = [pytest.mark.browser, pytest.mark.timeout(150)]

CLOSED_TEXT = "Water boils at 100 °C at sea level; lower at altitude."
FRAME_KINDS = ["progress", "answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
               "run-status", "content", "evidence-summary", "error", "stream-summary", "done", "reset"]

TICKET_FLOW = """async ([base, run, token, kinds]) => {
  const minted = await fetch(`${base}/v1/runs/${run}/stream-tickets`,
                             {method: "POST", headers: {Authorization: `Bearer ${token}`}});
  const {ticket} = await minted.json();
  return await new Promise((resolve, reject) => {
    const seen = [];
    const source = new EventSource(`${base}/v1/runs/${run}/events?ticket=${encodeURIComponent(ticket)}`);
    for (const kind of kinds) source.addEventListener(kind, (e) => {
      if (!(e instanceof MessageEvent)) return;
      seen.push([Number(e.lastEventId), e.type]);
      if (e.type === "done") { source.close(); resolve(seen); }
    });
    source.onerror = () => { if (source.readyState === EventSource.CLOSED) reject(new Error("stream refused")); };
  });
}"""

RESUME = """async ([base, run, token, lastEventId]) => {
  const response = await fetch(`${base}/v1/runs/${run}/events`, {credentials: "include",
    headers: {Authorization: `Bearer ${token}`, "Last-Event-ID": String(lastEventId)}});
  const text = await response.text();
  return text.split("\\n\\n").filter((e) => e.includes("event: "))
    .map((e) => [Number(/^id: (\\d+)$/m.exec(e)[1]), /^event: (.+)$/m.exec(e)[1]]);
}"""

UI_HEADER = """async ([base, run, token]) => {
  const response = await fetch(`${base}/v1/ai-sdk/runs/${run}/stream`, {headers: {Authorization: `Bearer ${token}`}});
  await response.text();
  return response.headers.get("x-vercel-ai-ui-message-stream");
}"""

PREFLIGHT = "unmatched"
"""The access log's route of a request answered before routing (a preflight)."""

REFUSED = """async (request) => {
  try { await request(); return "answered"; } catch (error) { return `${error.name}: ${error.message}`; }
}"""


@pytest.fixture
def front_end() -> Iterator[FrontEnd]:
    with FrontEnd() as front:
        yield front


def delivery_allowing(isolated: Settings, origins: tuple[str, ...]) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"cors_origins": origins, "sse_keepalive_seconds": 1.0,
                                                          "stream_open_wait_seconds": 1.0}))


@pytest.fixture
def listing_it(isolated: Settings, front_end: FrontEnd) -> Iterator[Delivery]:
    yield from delivery_allowing(isolated, (front_end.origin,))


def requests_to(delivery: Delivery, route: str, method: str) -> dict[str, int]:
    """Requests of ``method`` on ``route`` that reached the server, by status."""
    counts: dict[str, int] = {}
    for metric in delivery.app.state.metrics.registry.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (sample.name == "imprint_delivery_http_requests_total" and labels.get("route") == route
                    and labels.get("method") == method):
                counts[labels["status"]] = counts.get(labels["status"], 0) + int(sample.value)
    return counts


def feed_a_run(delivery: Delivery, run: str) -> None:
    delivery.feeder.send(running(run), published(run, "b1", 1, "Boiling point: 100 °C.", 1),
                         published(run, "b2", 1, "Built on a report that will be revoked.", 2),
                         published(run, "b1", 2, "Boiling point, revised: 100 °C.", 1),
                         withdrawn(run, "b2", 1, "source_revoked", source_id="src-private-1"),
                         settled(run), closed(run, CLOSED_TEXT))


def open_front_end(page: Any, front_end: FrontEnd) -> None:
    page.goto(f"{front_end.origin}/")
    page.wait_for_function("() => window.linesLoaded && window.linesLoaded.length === 3")


def read_with(page: Any, line: str, delivery: Delivery, run: str, **options: Any) -> dict[str, Any]:
    return page.evaluate("([line, options]) => window.readRun(line, options)", [line, {
        "api": f"{delivery.url}/v1/ai-sdk/runs", "chatId": run,
        "headers": {"Authorization": f"Bearer {delivery.token()}"}, **options}])


def test_a_listed_origins_page_reads_a_run_with_the_ai_sdk_opens_a_ticket_stream_and_resumes(
    front_end: FrontEnd, listing_it: Delivery, chromium: Any,
) -> None:
    page, delivery, run, token = chromium, listing_it, "run-cors-allowed", listing_it.token()
    assert front_end.origin != delivery.url, "two origins: the page's and Delivery's"
    feed_a_run(delivery, run)
    open_front_end(page, front_end)
    messages = {}
    for line in LINES:
        result = read_with(page, line, delivery, run, credentials="include" if line == "ai6" else None)
        assert result["status"] == "finished" and result["errors"] == [], (line, result)
        message = result["message"]
        blocks = {p["id"]: p["data"] for p in message["parts"] if p["type"] == "data-block"}
        assert blocks["b1"]["state"] == "committed" and blocks["b1"]["markdown"] == "Boiling point, revised: 100 °C."
        assert blocks["b2"]["state"] == "withdrawn" and "src-private" not in str(message)
        assert [p["text"] for p in message["parts"] if p["type"] == "text"] == [CLOSED_TEXT]
        messages[line] = message
    assert messages["ai5"] == messages["ai6"] == messages["ai7"]

    frames = page.evaluate(TICKET_FLOW, [delivery.url, run, token, FRAME_KINDS])
    assert [i for i, _ in frames] == list(range(1, len(frames) + 1)) and frames[-1][1] == "done"
    resumed = page.evaluate(RESUME, [delivery.url, run, token, 3])
    assert [i for i, _ in resumed] == list(range(4, frames[-1][0] + 1)), "Last-Event-ID crosses origins (D1)"
    beyond = page.evaluate(RESUME, [delivery.url, run, token, frames[-1][0] + 9])
    assert beyond[0] == [0, "reset"] and [i for i, _ in beyond[1:]] == [i for i, _ in frames], "and D8"
    assert page.evaluate(UI_HEADER, [delivery.url, run, token]) == "v1", "the exposed stream header is readable"
    # preflights are answered before routing: the access log counts them as unmatched
    preflights = requests_to(delivery, PREFLIGHT, "OPTIONS")
    assert set(preflights) == {"200"} and preflights["200"] >= 1, preflights


@pytest.mark.parametrize("listed", ["another origin", "none"])
def test_an_unlisted_origins_page_is_refused_by_the_browser(
    isolated: Settings, front_end: FrontEnd, listed: str, chromium: Any,
) -> None:
    origins = ("http://127.0.0.1:1",) if listed == "another origin" else ()
    for delivery in delivery_allowing(isolated, origins):
        page, run, token = chromium, "run-cors-refused", delivery.token()
        feed_a_run(delivery, run)
        open_front_end(page, front_end)
        for line in LINES:
            result = read_with(page, line, delivery, run)
            assert result["status"] == "error" and result["message"] is None, (line, result)
            assert any("Failed to fetch" in error for error in result["errors"]), result["errors"]
        refused = page.evaluate(f"""() => Promise.all([
            ({REFUSED})(() => fetch("{delivery.url}/v1/runs/{run}/stream-tickets",
                                    {{method: "POST", headers: {{Authorization: "Bearer {token}"}}}})),
            ({REFUSED})(() => fetch("{delivery.url}/v1/runs/{run}/events",
                                    {{headers: {{Authorization: "Bearer {token}", "Last-Event-ID": "3"}}}})),
            ({REFUSED})(() => fetch("{delivery.url}/healthz")),
        ])""")
        assert all(r.startswith("TypeError: Failed to fetch") for r in refused), refused
        # What needs a preflight was never sent: the browser stopped at the preflight.
        assert requests_to(delivery, "/v1/ai-sdk/runs/{run_id}/stream", "GET") == {}
        assert requests_to(delivery, "/v1/runs/{run_id}/stream-tickets", "POST") == {}
        assert requests_to(delivery, "/v1/runs/{run_id}/events", "GET") == {}
        if origins:  # refused by the CORS middleware, before routing
            preflights = requests_to(delivery, PREFLIGHT, "OPTIONS")
            assert set(preflights) == {"403"} and preflights["403"] >= 1, preflights
        else:  # no CORS at all: the route itself knows no OPTIONS
            preflights = requests_to(delivery, "/v1/runs/{run_id}/stream-tickets", "OPTIONS")
            assert preflights == {"405": 1}, preflights
        # A simple request is sent and answered; the browser keeps the answer from the page.
        assert requests_to(delivery, "/healthz", "GET") == {"200": 1}

"""R8 in Debian's Chromium: the reference page (index.html + app.js, unchanged) reads, with the
browser's own EventSource and with its fetch transport, a run whose stream carries frames of a
kind no v1 client knows — before any block and between revisions — served by the client
conformance kit's server (real HTTP SSE, Delivery's own frames and summary). Chromium never
dispatches a kind nobody listens to: the page must skip it, keep its id as a position and
still verify ``stream-summary``, which counts it (D3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.conformance.client.cases import revision_in_place
from services.conformance.client.script import LATER_KIND, MemoryView, Messages, required_view
from services.conformance.client.server import KitServer

STATIC = Path(__file__).resolve().parents[2] / "services" / "delivery" / "static"
STATE = """() => ({errors: window.imprintClient.errors, validated: window.imprintClient.validated,
    done: window.imprintClient.done, held: Array.from(window.imprintClient.held.keys()).sort((a, b) => a - b),
    skipped: Array.from(window.imprintClient.skipped || []), transport: window.imprintClient.transport,
    blocks: Array.from(document.querySelectorAll('#blocks [data-block-id]')).map(
        (el) => [el.dataset.blockId, Number(el.dataset.revision)])})"""


def serve_page(page: Any, base: str) -> None:
    """The page's own files from the kit's origin (same origin as its API, as behind Delivery)."""
    files = {"/": ("index.html", "text/html"), "/static/app.js": ("app.js", "text/javascript"),
             "/static/style.css": ("style.css", "text/css")}
    def answer(name: str, kind: str) -> Any:
        return lambda route, request: route.fulfill(status=200, content_type=kind, body=(STATIC / name).read_text())

    for path, (name, kind) in files.items():
        page.route(base + path, answer(name, kind))


@pytest.mark.rule("R8")
@pytest.mark.rule("D3")
@pytest.mark.parametrize("transport", ["eventsource", "fetch"])
def test_the_page_skips_frames_of_a_kind_it_does_not_know_and_verifies_the_summary(
        chromium: Any, transport: str) -> None:
    server = KitServer()
    try:
        m = Messages("run-later", "conv-later")
        view = MemoryView(m.run_id, m.conversation_id)
        session = server.play(view)
        for step in revision_in_place(m):
            view.later_frame()  # before the step: before any block, then between revisions
            view.apply(step)
        later = [f.id for f in view.frames if f.event == LATER_KIND]
        assert len(later) == 4 and view.ended
        serve_page(chromium, server.url)
        chromium.goto(f"{server.url}/#run={m.run_id}&token={session.token}&transport={transport}")
        chromium.wait_for_function("() => window.imprintClient && window.imprintClient.validated !== null",
                                   timeout=30_000)
        state = chromium.evaluate(STATE)
        assert state["transport"] == transport
        assert state["validated"] is True and state["errors"] == [], state
        assert state["held"] == list(range(1, view.last_frame_id + 1)), "every id held, the later kinds too"
        if transport == "eventsource":
            assert sorted(state["skipped"]) == later, "Chromium dispatched none of them: stepped over"
        required = required_view(view)
        assert state["blocks"] == [[b, r] for b, r, _ in required["blocks"]]
        assert chromium.errors == []  # type: ignore[attr-defined]
    finally:
        server.close()

"""The run inspector in Chromium, against a real Delivery (uvicorn), the run's Publication
log and a real runtime journal in PostgreSQL, and Kafka for the announcements.

The seed's crash window: Publication committed blocks A, B and C; the journal
recorded B and C, never A. Delivery sent all three, the client received and
rendered them. The inspector shows the five facts per block revision with their
times, beside the journal's lifecycle, and marks A "committed, not journaled"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from imprint.contracts.runtime import RunQueued, RunStarted, ToolReceipt
from imprint.contracts.topics import Topic
from services.delivery.operator import mint_operator_token
from tests.integration.delivery.support import Delivery, off_thread, read_stream
from tests.integration.recovery.recovery_support import (
    ACCOUNT,
    PRIVATE_OWN,
    PUBLIC,
    admitted,
    feeding,
    granted,
    numeric,
    part,
    registered,
    text,
)
from tests.integration.recovery.test_recovery_journal import committed_announcements, journal_sees
from tests.support.kafka import produce, read_topic
from tests.support.delivery_builders import running

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]
RUN = "run-inspect"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "inspector.png"
"""Rewritten only with ``IMPRINT_UPDATE_SCREENSHOT=1`` (then look at it); otherwise the shot goes to tmp."""


def crash_window(delivery: Delivery) -> dict[str, str]:
    """Runtime proposals on Kafka, committed by Publication (previews announced), the
    journal told about B and C only, Delivery fed every announcement."""
    settings = delivery.settings
    proposals = [part(RUN, "call-a", f"A cites [[cite:{PUBLIC}]]"), part(RUN, "call-b", "B weighs [[num:num-weight]]"),
                 text(RUN, f"C, from entry A, cites [[cite:{PRIVATE_OWN}]]")]
    with feeding(settings) as (app, feed):
        feed(registered(), registered(PRIVATE_OWN, "private", ACCOUNT), topic=Topic.SOURCES)
        feed(admitted(RUN), granted(RUN), granted(RUN, PRIVATE_OWN, "private", ACCOUNT), numeric(RUN, "12.5", 1))
        feed(*proposals)
        run = app.run(RUN)
        assert run is not None
        blocks = {r.candidate_id: r.block_id for r in run.live_blocks()}
        previews = [m for t, m in feed.emitted if m.type == "answer.preview"]
    off_thread(produce(settings, Topic.RUNTIME, *proposals))
    off_thread(produce(settings, Topic.PUBLICATION, *previews))
    announced = committed_announcements(settings, RUN)
    a = blocks["tool:call-a"]
    journal_sees(settings, admitted(RUN), RunQueued(run_id=RUN), RunStarted(run_id=RUN),
                 ToolReceipt(run_id=RUN, tool_call_id="call-b", status="ok"),
                 *(m for m in announced if getattr(m, "block", None) is None or m.block.block_id != a))
    delivery.feeder.send(running(RUN), *announced)
    return blocks


def client_observes(delivery: Delivery, block_ids: list[str]) -> None:
    """A client reads the stream, drops it, and reports receipt and render."""
    token = delivery.token(ACCOUNT)
    frames, _ = read_stream(delivery.url, RUN, token, until=lambda fs: sum(
        f.event == "answer-publication" for f in fs) >= len(block_ids))
    last = max(f.id for f in frames if f.id is not None)
    for kind in ("client.received", "client.rendered"):
        response = httpx.post(f"{delivery.url}/v1/runs/{RUN}/receipts", headers={"Authorization": f"Bearer {token}"},
                              json={"type": kind, "last_event_id": last, "block_ids": block_ids}, timeout=10)
        assert response.status_code == 202, response.text
    wanted = {"delivery.sent", "client.received", "client.rendered"}
    off_thread(read_topic(delivery.settings, Topic.DELIVERY,
                          until=lambda values: wanted <= {v["type"] for v in values}))


def row(page: Any, block_id: str) -> Any:
    return page.locator(f"#rows tr[data-block-id='{block_id}']")


@pytest.mark.rule("R2")
@pytest.mark.rule("R5")
@pytest.mark.rule("D4")
@pytest.mark.rule("D6")
def test_the_inspector_marks_the_crash_window_and_keeps_the_five_facts_apart(page: Any, delivery: Delivery,
                                                                              tmp_path: Path) -> None:
    blocks = crash_window(delivery)
    a, b, c = blocks["tool:call-a"], blocks["tool:call-b"], blocks["text:turn-1:0"]
    client_observes(delivery, [a, b, c])

    operator = mint_operator_token(delivery.settings, "ops-1")
    page.set_viewport_size({"width": 1500, "height": 640})
    page.goto(f"{delivery.url}/operator#run={RUN}&token={operator}")
    page.wait_for_function("() => window.imprintInspector.loads >= 1 && document.querySelectorAll('#rows tr').length === 3")
    assert page.errors == []  # type: ignore[attr-defined]

    assert row(page, a).get_attribute("class") == "disagrees"
    assert row(page, a).locator("[data-mark]").all_inner_texts() == ["committed, not journaled"]
    assert row(page, a).locator("td.journaled").inner_text() == "never recorded"
    for block_id in (b, c):
        assert row(page, block_id).locator("td.marks").inner_text() == "agree"
        assert "published" in row(page, block_id).locator("td.journaled").inner_text()
    for block_id in (a, b, c):  # every fact present, each in its own cell, each with a time
        for stage in ("proposed", "previewed", "committed", "sent", "received", "rendered"):
            cell = row(page, block_id).locator(f"td[data-stage={stage}]")
            assert "present" in (cell.get_attribute("class") or ""), (block_id, stage)
            assert cell.locator("time").inner_text().count(":") == 2, (block_id, stage)
        assert "absent" in (row(page, block_id).locator("td[data-stage=withdrawn]").get_attribute("class") or "")
    assert "frames" in row(page, a).locator("td[data-stage=sent]").inner_text()
    assert page.inner_text("#s-verdict") == "1 disagreement"
    lifecycle = page.inner_text("#s-lifecycle")
    assert "admitted" in lifecycle and "running" in lifecycle
    assert "committed, not journaled" in page.inner_text("#disagreement-list")
    shot = SCREENSHOT if os.environ.get("IMPRINT_UPDATE_SCREENSHOT") == "1" else tmp_path / "inspector.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # D6: an ordinary account gets 404 for the timeline, a bad token 401; the page says so
    ordinary = delivery.token(ACCOUNT)
    response = httpx.get(f"{delivery.url}/v1/operator/runs/{RUN}/timeline",
                         headers={"Authorization": f"Bearer {ordinary}"}, timeout=10)
    assert response.status_code == 404
    assert httpx.get(f"{delivery.url}/v1/operator/runs/{RUN}/timeline", timeout=10).status_code == 401
    missing = httpx.get(f"{delivery.url}/v1/operator/runs/no-such-run/timeline",
                        headers={"Authorization": f"Bearer {operator}"}, timeout=10)
    assert missing.status_code == 404
    page.goto(f"{delivery.url}/operator#run={RUN}&token={ordinary}")
    page.reload()
    page.wait_for_function("() => window.imprintInspector.loads >= 1")
    assert "no operator claim" in page.inner_text("#problem")
    assert page.locator("#rows tr").count() == 0

"""The reference web client in a real browser: order, in-place revisions, withdrawal,
resume after a killed connection, safe rendering of hostile markdown, receipts, and
its own D3 check of the stream."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.contracts.runs import RunTransitioned
from imprint.contracts.topics import Topic
from tests.integration.delivery.support import Delivery, KillableProxy, off_thread
from tests.support.kafka import read_topic
from tests.support.delivery_builders import closed, preview, published, running, settled, withdrawn

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]


def open_run(page: Any, base_url: str, run_id: str, token: str, transport: str | None = None) -> None:
    page.goto(f"{base_url}/#run={run_id}&token={token}" + (f"&transport={transport}" if transport else ""))
    page.wait_for_function("() => window.imprintClient && window.imprintClient.connections >= 1")


def block_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all("#blocks .block", "els => els.map(e => e.dataset.blockId)")


def wait_blocks(page: Any, ids: list[str]) -> None:
    page.wait_for_function(
        "ids => JSON.stringify(Array.from(document.querySelectorAll('#blocks .block')).map(e => e.dataset.blockId))"
        " === JSON.stringify(ids)", arg=ids)


@pytest.mark.rule("P18")
@pytest.mark.rule("D1")
def test_blocks_appear_in_ordinal_order(page: Any, delivery: Delivery) -> None:
    run = "run-b-order"
    delivery.feeder.send(running(run), published(run, "b3", 1, "Third.", 3), published(run, "b1", 1, "First.", 1))
    open_run(page, delivery.url, run, delivery.token())
    wait_blocks(page, ["b1", "b3"])
    delivery.feeder.send(preview(run, "b2", 1, "Second, arriving live.", 2))
    wait_blocks(page, ["b1", "b2", "b3"])
    assert page.inner_text("[data-block-id=b2] .body") == "Second, arriving live."
    assert page.get_attribute("[data-block-id=b2]", "data-status") == "unsaved"
    assert "unsaved preview" in page.inner_text("[data-block-id=b2] .badges")


@pytest.mark.rule("P18")
@pytest.mark.rule("P16")
def test_a_revision_replaces_its_block_in_place(page: Any, delivery: Delivery) -> None:
    run = "run-b-revise"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Original claim.", 1,
                                                  source_hint="sources_verified"),
                         published(run, "b2", 1, "Another block.", 2))
    open_run(page, delivery.url, run, delivery.token())
    wait_blocks(page, ["b1", "b2"])
    page.evaluate("() => { document.querySelector('[data-block-id=b1]').__marker = 'same-node'; }")
    delivery.feeder.send(published(run, "b1", 2, "Revised claim.", 1, source_hint="sources_partial"))
    page.wait_for_selector("[data-block-id=b1][data-revision='2']")
    wait_blocks(page, ["b1", "b2"])
    assert page.evaluate("() => document.querySelector('[data-block-id=b1]').__marker") == "same-node"
    assert page.inner_text("[data-block-id=b1] .body") == "Revised claim."
    assert "some sources unverified" in page.inner_text("[data-block-id=b1] .badges")
    assert "Original claim." not in page.inner_text("#blocks")


@pytest.mark.rule("P21")
def test_a_withdrawn_block_disappears_from_an_open_page(page: Any, delivery: Delivery) -> None:
    run = "run-b-withdraw"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Built on a report that will be revoked.", 1),
                         published(run, "b2", 1, "Independent.", 2))
    open_run(page, delivery.url, run, delivery.token())
    wait_blocks(page, ["b1", "b2"])
    delivery.feeder.send(withdrawn(run, "b1", 1, "source_revoked", source_id="src-private-1"))
    wait_blocks(page, ["b2"])
    assert "revoked" not in page.inner_text("#blocks")
    # a new page never sees it either
    fresh = page.context.new_page()
    open_run(fresh, delivery.url, run, delivery.token())
    wait_blocks(fresh, ["b2"])


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D5")
def test_a_killed_connection_resumes_without_duplicates(page: Any, delivery: Delivery) -> None:
    run = "run-b-kill"
    proxy = KillableProxy(delivery.server.port)
    try:
        delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 4)])
        open_run(page, f"http://127.0.0.1:{proxy.port}", run, delivery.token())
        page.wait_for_function("() => window.imprintClient.lastId >= 4")
        assert proxy.kill_all() >= 1
        delivery.feeder.send(*[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(4, 7)])
        delivery.feeder.send(settled(run), closed(run, "All six blocks, closed."))
        try:
            page.wait_for_function("() => window.imprintClient.done", timeout=20_000)
        except Exception:
            print(page.evaluate("""() => JSON.stringify({last: window.imprintClient.lastId, errors: window.imprintClient.errors,
                connections: window.imprintClient.connections, state: document.getElementById('connection').textContent})"""))
            print("accepted", proxy.accepted)
            raise
        state = page.evaluate("""() => ({ids: Array.from(window.imprintClient.held.keys()),
            dups: window.imprintClient.duplicates, errors: window.imprintClient.errors,
            validated: window.imprintClient.validated, connections: window.imprintClient.connections})""")
        assert state["dups"] == 0 and state["errors"] == []
        assert state["ids"] == list(range(1, len(state["ids"]) + 1))
        assert state["validated"] is True and state["connections"] >= 2
        assert page.evaluate("() => window.imprintClient.transport") == "eventsource"
        assert proxy.accepted >= 2
        wait_blocks(page, [f"b{i}" for i in range(1, 7)])
        assert page.get_attribute("#integrity", "data-state") == "ok"
        assert page.inner_text("#content") == "All six blocks, closed."
        values = off_thread(read_topic(delivery.settings, Topic.DELIVERY, until=lambda vs: {
            "delivery.interrupted", "delivery.completed"} <= {v["type"] for v in vs if v["run_id"] == run}))
        assert any(v["type"] == "delivery.interrupted" for v in values), "the killed connection was an interruption"
    finally:
        proxy.close()


@pytest.mark.rule("D6")
def test_script_and_onerror_payloads_render_as_text(page: Any, delivery: Delivery) -> None:
    run = "run-b-xss"
    hostile = ('<script>window.__pwned = 1</script> and <img src=x onerror="window.__pwned = 2"> '
               'plus **<b onmouseover="window.__pwned=3">bold</b>** and [[cite:javascript:alert(1)]]')
    delivery.feeder.send(running(run), published(run, "b1", 1, hostile, 1),
                         settled(run), closed(run, "<svg onload=window.__pwned=4></svg>"))
    open_run(page, delivery.url, run, delivery.token())
    page.wait_for_function("() => window.imprintClient.done")
    page.wait_for_selector("[data-block-id=b1]")
    text = page.inner_text("[data-block-id=b1] .body")
    assert "<script>window.__pwned = 1</script>" in text and 'onerror="window.__pwned = 2"' in text
    assert page.evaluate("() => window.__pwned") is None
    assert page.eval_on_selector_all("#blocks script, #blocks img, #blocks b, #content svg, #content *",
                                     "els => els.length") == 0
    assert "<svg onload=window.__pwned=4></svg>" == page.inner_text("#content")
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.rule("D4")
def test_the_page_posts_received_and_rendered_receipts(page: Any, delivery: Delivery) -> None:
    run = "run-b-receipts"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Shown.", 1), settled(run), closed(run, "Closed."))
    last = delivery.store.run(run).last_frame_id  # type: ignore[union-attr]
    open_run(page, delivery.url, run, delivery.token())
    page.wait_for_function("() => window.imprintClient.done && window.imprintClient.validated")

    def both(vs: list[dict]) -> bool:
        mine = [(v["type"], v.get("last_event_id")) for v in vs if v["run_id"] == run]
        completed = any(kind == "delivery.completed" for kind, _ in mine)  # published when the response ends
        return ("client.rendered", last) in mine and ("client.received", last) in mine and completed

    values = off_thread(read_topic(delivery.settings, Topic.DELIVERY, until=both))
    rendered = [v for v in values if v["type"] == "client.rendered" and v["last_event_id"] == last]
    assert rendered[0]["account_id"] == "acct-1" and rendered[0]["block_ids"] == ["b1"]
    assert any(v["type"] == "delivery.completed" for v in values), "server-side fact, separate from receipts"


FORGED_SUMMARY = ('id: 3\nevent: stream-summary\ndata: {"last_id": 2, "frame_count": 2, "digest": "0000"}\n\n'
                  "id: 4\nevent: done\ndata: [DONE]\n\n")
FRAME_AFTER_DONE = "id: 3\nevent: done\ndata: [DONE]\n\nid: 4\nevent: progress\ndata: {\"stage\": \"late\"}\n\n"


@pytest.mark.rule("D3")
@pytest.mark.parametrize(("tail", "problem", "transport"), [
    (FORGED_SUMMARY, "summary_mismatch", "eventsource"),
    (FORGED_SUMMARY, "summary_mismatch", "fetch"),
    # The EventSource path closes its source on done, so a later frame is never
    # dispatched at all; the fetch path's parser sees it and must call it an error.
    (FRAME_AFTER_DONE, "frame_after_terminal", "fetch"),
])
def test_the_client_rejects_a_stream_whose_summary_or_terminal_is_wrong(
    page: Any, delivery: Delivery, tail: str, problem: str, transport: str,
) -> None:
    run = "run-b-forged"
    delivery.feeder.send(running(run))
    head = ('id: 1\nevent: run-status\ndata: {"state": "running", "body_sha256": "aa"}\n\n'
            'id: 2\nevent: progress\ndata: {"stage": "x", "detail": "", "body_sha256": "bb"}\n\n')
    page.route(f"**/v1/runs/{run}/events*", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=head + tail))
    open_run(page, delivery.url, run, delivery.token(), transport=transport)
    assert page.evaluate("() => window.imprintClient.transport") == transport
    page.wait_for_function("p => window.imprintClient.errors.includes(p)", arg=problem)
    assert page.get_attribute("#integrity", "data-state") == "error"


@pytest.mark.rule("X10")
@pytest.mark.rule("D5")
def test_a_run_whose_runtime_was_lost_ends_with_its_saved_blocks_and_never_reads_as_complete(
        page: Any, delivery: Delivery) -> None:
    run = "run-b-lost"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Saved before the runtime was lost.", 1))
    open_run(page, delivery.url, run, delivery.token())
    wait_blocks(page, ["b1"])
    lost = RunTransitioned(run_id=run, account_id="acct-1", conversation_id=f"conv-{run}", state="failed",
                           previous="running", sequence=4, reason="runtime_lost")
    delivery.feeder.send(lost, closed(run, None, state="failed"), settled(run, "failed"))
    page.wait_for_function("() => window.imprintClient.done")
    assert page.get_attribute("#integrity", "data-state") == "ok", "a complete, verified stream"
    status = page.inner_text("#status")
    assert status.startswith("failed") and "stopped responding" in status and "incomplete" in status, status
    assert status != "complete"
    wait_blocks(page, ["b1"])
    assert page.inner_text("[data-block-id=b1] .body") == "Saved before the runtime was lost."


@pytest.mark.rule("X11")
@pytest.mark.rule("P14")
@pytest.mark.rule("D5")
def test_stop_generating_names_the_saved_blocks_kept_and_drops_the_preview_the_run_never_saved(
        page: Any, delivery: Delivery) -> None:
    run = "run-b-stop"
    delivery.feeder.send(running(run), published(run, "b1", 1, "Saved before the stop.", 1),
                         preview(run, "b2", 1, "Previewed, never saved.", 2))
    open_run(page, delivery.url, run, delivery.token())
    wait_blocks(page, ["b1", "b2"])
    assert page.get_attribute("[data-block-id=b2]", "data-status") == "unsaved"

    with page.expect_response(lambda r: r.url.endswith(f"/v1/runs/{run}/cancel")) as answered:
        page.click("#cancel")
    assert answered.value.status == 202
    assert [(b["block_id"], b["revision"]) for b in answered.value.json()["kept"]["blocks"]] == [("b1", 1)]
    page.wait_for_selector("#stop")
    assert page.get_attribute("#stop", "data-kept") == '[["b1",1]]'
    assert "1 saved block is kept: b1 (revision 1)" in page.inner_text("#stop")
    assert page.is_disabled("#cancel")

    stopped = RunTransitioned(run_id=run, account_id="acct-1", conversation_id=f"conv-{run}", state="stopped",
                              previous="running", sequence=4, reason="stop_requested")
    delivery.feeder.send(stopped, closed(run, None, state="stopped"), settled(run, "stopped"))
    page.wait_for_function("() => window.imprintClient.done")
    assert page.get_attribute("#integrity", "data-state") == "ok", "a complete, verified stream"
    wait_blocks(page, ["b1"])
    assert page.get_attribute("[data-block-id=b1]", "data-status") == "saved"
    assert page.evaluate("() => window.imprintClient.dropped") == ["b2"]
    assert "unsaved preview was dropped" in page.inner_text("#notices")
    status = page.inner_text("#status")
    assert status.startswith("stopped") and "at your request" in status and "incomplete" in status, status
    assert page.errors == []  # type: ignore[attr-defined]


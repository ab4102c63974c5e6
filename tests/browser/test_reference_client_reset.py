"""D8 in Chromium with the reference page: the page reads a run from one Delivery, then
its connection is cut and its next one reaches the same deployment restored from an
older backup (a Delivery on a store of its own that has fewer frames of the run). The
page's Last-Event-ID is beyond that run's last frame: it gets ``reset``, forgets what it
held, shows the run as that store has it, and its own D3 check of ``stream-summary``
passes — for a run still live there and for a run that ended there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.delivery.support import Delivery, KillableProxy, start_delivery
from tests.support.delivery_builders import closed, published, running, settled

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

STATE = """() => ({ids: Array.from(window.imprintClient.held.keys()), errors: window.imprintClient.errors,
    resets: window.imprintClient.resets, validated: window.imprintClient.validated, done: window.imprintClient.done,
    lastId: window.imprintClient.lastId, connections: window.imprintClient.connections,
    transport: window.imprintClient.transport,
    blocks: Array.from(document.querySelectorAll('#blocks .block')).map(e => e.dataset.blockId),
    notices: document.getElementById('notices').innerText, integrity: document.getElementById('integrity').dataset.state})"""


@pytest.fixture
def restored(delivery: Delivery) -> Iterator[Delivery]:
    """The same deployment restored from an older backup: a Delivery on a store of its own."""
    yield from start_delivery(delivery.settings, store_name="delivery_restored")


def read_through_proxy_then_restore(page: Any, delivery: Delivery, restored: Delivery, run: str,
                                    transport: str) -> KillableProxy:
    """The page reads ``run`` from ``delivery`` through a proxy, up to its last frame
    there; then the proxy's next connections go to ``restored`` and the live ones are cut."""
    proxy = KillableProxy(delivery.server.port)
    last = delivery.store.run(run).last_frame_id  # type: ignore[union-attr]
    page.goto(f"http://127.0.0.1:{proxy.port}/#run={run}&token={delivery.token()}&transport={transport}")
    page.wait_for_function("last => window.imprintClient && window.imprintClient.lastId >= last", arg=last)
    restored_last = restored.store.run(run).last_frame_id  # type: ignore[union-attr]
    assert restored_last < last, "the page holds a position the restored store does not have"
    proxy.target_port = restored.server.port
    assert proxy.kill_all() >= 1
    return proxy


@pytest.mark.rule("D8")
@pytest.mark.rule("D3")
@pytest.mark.rule("D1")
def test_the_page_starts_over_on_a_live_run_the_restored_store_has_fewer_frames_of(
    page: Any, delivery: Delivery, restored: Delivery,
) -> None:
    run = "run-b-reset-live"
    delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 7)])
    restored.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 3)])
    proxy = read_through_proxy_then_restore(page, delivery, restored, run, "eventsource")
    try:
        page.wait_for_function("() => window.imprintClient.resets === 1 && window.imprintClient.lastId >= 3")
        assert page.evaluate("() => Array.from(document.querySelectorAll('#blocks .block'))"
                             ".map(e => e.dataset.blockId)") in (["b1", "b2"], ["b1"], []), "what it held is gone"
        restored.feeder.send(published(run, "b3", 1, "Block 3, live after the restore.", 3))
        restored.feeder.send(settled(run), closed(run, "Three blocks, closed."))
        page.wait_for_function("() => window.imprintClient.done", timeout=30_000)
        state = page.evaluate(STATE)
        assert state["errors"] == [] and state["resets"] == 1, state
        assert state["validated"] is True and state["integrity"] == "ok", "stream-summary checks out after the reset"
        assert state["ids"] == list(range(1, len(state["ids"]) + 1)), "frames from 1 again, no gap, no repeat"
        assert state["ids"][-1] == restored.store.run(run).last_frame_id  # type: ignore[union-attr]
        assert state["blocks"] == ["b1", "b2", "b3"] and state["transport"] == "eventsource"
        assert "started over" in state["notices"]
        assert page.inner_text("#content") == "Three blocks, closed."
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        proxy.close()


@pytest.mark.rule("D8")
@pytest.mark.rule("D3")
@pytest.mark.rule("D1")
def test_the_page_starts_over_on_a_finished_run_instead_of_stopping_with_nothing(
    page: Any, delivery: Delivery, restored: Delivery,
) -> None:
    run = "run-b-reset-finished"
    delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 10)])
    restored.feeder.send(running(run), published(run, "b1", 1, "Block 1.", 1), settled(run),
                         closed(run, "One block, closed."))
    proxy = read_through_proxy_then_restore(page, delivery, restored, run, "fetch")
    try:
        page.wait_for_function("() => window.imprintClient.done", timeout=30_000)
        state = page.evaluate(STATE)
        assert state["errors"] == [] and state["resets"] == 1, state
        assert state["validated"] is True and state["integrity"] == "ok"
        assert state["ids"] == list(range(1, restored.store.run(run).last_frame_id + 1))  # type: ignore[union-attr]
        assert state["blocks"] == ["b1"] and state["transport"] == "fetch"
        assert page.inner_text("#content") == "One block, closed."
        assert state["connections"] >= 2
    finally:
        proxy.close()

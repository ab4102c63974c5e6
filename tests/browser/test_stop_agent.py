"""X11 in Chromium against the whole stack as real processes over real Kafka (each store
backend): a real pydantic-ai ``Agent`` in its own process (``tests/e2e/slow_runtime.py``: a
``FunctionModel`` that writes text and a block, then keeps producing slowly) is stopped from
the reference page's "Stop generating".

Before that, the page's connection is dropped: it resumes, and the run goes on (D2: a
dropped connection is an interruption, never a stop). Then the button: the cancel answer
names the committed block revisions the user keeps, the Journal records the request, the
runtime SDK cancels the agent's model call after the click and ends the run ``stopped``, its
heartbeats end with it, and the page keeps the committed blocks and says the run was stopped.
How soon the call is cancelled (within 2 s) is measured by ``make bench``
(``bench/rule_timings.py``, ``stop_s``), against that bound."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.stack import Stack, inspected, inspected_until

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(300)]

ACCOUNT = "acct-stop"
HEARTBEAT = 1.0
BLOCK_ID = re.compile(r"blk_[0-9a-f]{32}")


def page_blocks(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "#blocks .block", "els => els.map(e => ({block_id: e.dataset.blockId, revision: e.dataset.revision,"
        " status: e.dataset.status, body: e.querySelector('.body').innerText}))")


def run_status(stack: Stack, run_id: str, token: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.base_url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.rule("X11")
@pytest.mark.rule("D2")
@pytest.mark.rule("D5")
@pytest.mark.rule("P20")
def test_stop_generating_stops_a_real_agent_and_the_page_keeps_its_saved_blocks(
        isolated: Settings, chromium: Any) -> None:
    page, run_id, token = chromium, "run-stop-1", mint_token(isolated, ACCOUNT)
    with Stack(isolated) as stack:
        stack.start_command("runtime", "tests.e2e.slow_runtime", [run_id, ACCOUNT, str(HEARTBEAT)])
        stack.wait_for_line("runtime", "RUN STARTED")
        stack.wait_for_run(run_id, token)
        page.goto(f"{stack.base_url}/#run={run_id}&token={token}")
        page.wait_for_function("() => window.imprintClient && window.imprintClient.connections >= 1")
        block = BLOCK_ID.search(stack.wait_for_line("runtime", "BLOCK SETTLED"))
        assert block, "the tool told the model the block id the Host issued"
        stack.wait_for_line("runtime", "MODEL PRODUCING")
        page.wait_for_function("() => document.querySelectorAll('#blocks .block[data-status=saved]').length === 2")

        # D2: the page's connection drops; it resumes, and the run goes on.
        page.evaluate("() => window.imprintClient.dropConnection()")
        page.wait_for_function("() => window.imprintClient.connections >= 2")
        time.sleep(3 * HEARTBEAT)
        status = run_status(stack, run_id, token)
        assert status["state"] == "running" and not status["terminal"], f"a dropped connection stops nothing: {status}"
        assert "MODEL CANCELLED" not in stack.log("runtime")
        assert inspected(isolated, run_id)["lifecycle"]["stop_requested"] is None, "no stop was ever requested"

        # X11: the button.
        with page.expect_response(lambda r: r.url.endswith(f"/v1/runs/{run_id}/cancel")) as answered:
            clicked = time.time()
            page.click("#cancel")
        assert answered.value.status == 202
        kept = answered.value.json()["kept"]

        cancelled = stack.wait_for_line("runtime", "MODEL CANCELLED", timeout=60)
        assert float(cancelled.split()[-1]) >= clicked, "the click cancelled the agent's model call, nothing before it"
        stack.wait_for_line("runtime", "RUN STOPPED")
        page.wait_for_function("() => window.imprintClient.done", timeout=30_000)

        # The page: the committed blocks stay, the stop is shown, the stream verified.
        assert page.get_attribute("#integrity", "data-state") == "ok", page.inner_text("#integrity")
        shown = page_blocks(page)
        assert [b["status"] for b in shown] == ["saved", "saved"], shown
        assert block.group() in [b["block_id"] for b in shown]
        assert "boils lower" in " ".join(b["body"] for b in shown)
        page_status = page.inner_text("#status")
        assert page_status.startswith("stopped") and "at your request" in page_status, page_status
        assert "incomplete" in page_status and page_status != "complete"
        assert "2 saved blocks are kept" in page.inner_text("#stop")
        assert page.errors == []  # type: ignore[attr-defined]

        # The cancel answer named exactly what was committed: the page's saved blocks, and the
        # Publication log's committed revisions (nothing committed after the stop).
        named = [(b["block_id"], b["revision"]) for b in kept["blocks"]]
        assert named == [(b["block_id"], int(b["revision"])) for b in shown]

        def recorded(doc: dict[str, Any]) -> bool:
            return doc["lifecycle"]["state"] == "stopped"

        document = inspected_until(isolated, run_id, recorded)
        committed = [(b["block_id"], row["revision"], row["committed"]["receipt_id"])
                     for b in document["blocks"] if b["status"] == "live" for row in b["revisions"] if row["current"]]
        assert [(b["block_id"], b["revision"], b["receipt_id"]) for b in kept["blocks"]] == committed

        # The run ended stopped, at its user's request, which the Journal recorded; no heartbeat
        # followed the stop (the Journal would have refused and recorded it).
        status = run_status(stack, run_id, token)
        assert (status["state"], status["reason"], status["display"]) == ("stopped", "stop_requested", "stopped")
        lifecycle = document["lifecycle"]
        assert lifecycle["stop_requested"] is not None
        assert [t["state"] for t in lifecycle["transitions"]][-1] == "stopped"
        time.sleep(3 * HEARTBEAT)
        assert inspected(isolated, run_id)["lifecycle"]["refusals"] == [], "nothing of the runtime came after its stop"
        assert stack.children["runtime"].wait(timeout=30) == 0, "the runtime ended the run and exited"

"""D7 in Chromium over the whole stack as processes (Publication and its relay, the
Journal, Delivery; real Kafka, the store on SQLite and on PostgreSQL): a page left open
on a run that already finished strikes a block once its source is revoked — nothing
may follow the run's ``done``, so the withdrawal reaches the page on its conversation's
notices stream — and Delivery's report names that page's client as having rendered the
block and received the withdrawal (as JSON, on the operator page and in ``imprint
inspect``), with nothing private in the notice or the report. How soon the withdrawal reaches an open
client (within 2 s) is measured by ``make bench`` (``bench/rule_timings.py``, ``strike_s``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from imprint.contracts.registry import encode
from imprint.contracts.runtime import AnswerPart
from imprint.contracts.sources import SourceRevoked
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from services.delivery.operator import mint_operator_token
from tests.integration.delivery.support import off_thread
from tests.integration.recovery.test_recovery_cli import console
from tests.support.kafka import produce
from tests.support.runs import admitted, completed, granted, opened
from tests.support.sse import read_notices
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

ACCOUNT = "acct-notices"
PUBLIC, PRIVATE, TITLE = "src-public-almanac", "src-private-diary-31", "Grandmother's diary"


def part(run: str, call: str, markdown: str) -> AnswerPart:
    return AnswerPart(run_id=run, turn_id=f"turn-{call}", tool_call_id=call, sealed=True,
                      arguments={"markdown": markdown})


async def revoke(settings: Settings, revocation: SourceRevoked) -> None:
    """Send the revocation and wait for the broker's acknowledgement (it exists from then)."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic(Topic.SOURCES), encode(revocation),
                                     key=revocation.key.encode(), headers=[("type", revocation.type.encode())])
    finally:
        await producer.stop()


def answer(stack: Stack, run: str, token: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = httpx.get(f"{stack.base_url}/v1/runs/{run}/answer", headers={"Authorization": f"Bearer {token}"})
        if response.status_code == 200 and response.json()["terminal"] and len(response.json()["blocks"]) == 3:
            return response.json()
        time.sleep(0.2)
    raise AssertionError("the run never finished with its three blocks")


@pytest.mark.rule("D7")
@pytest.mark.rule("D4")
@pytest.mark.rule("D6")
@pytest.mark.rule("P21")
def test_a_page_left_open_on_a_finished_run_strikes_a_block_when_its_source_is_revoked(
    isolated: Settings, chromium: Any,
) -> None:
    page, run, token = chromium, "run-notices-browser", mint_token(isolated, ACCOUNT)
    with Stack(isolated) as stack:
        off_thread(produce(isolated, Topic.RUNTIME,
            *opened(admitted(run, account_id=ACCOUNT, question="When do swallows return?")),
            granted(run, PUBLIC, scope="public", owner_account_id="registry", title="Almanac"),
            granted(run, PRIVATE, scope="private", owner_account_id=ACCOUNT, title=TITLE),
            part(run, "call-1", f"Swallows return in April [[cite:{PUBLIC}]]."),
            part(run, "call-2", f"The diary saw them on the ninth [[cite:{PRIVATE}]]."),
            part(run, "call-3", "They leave again in September."),
            completed(run, "Swallows come back in April and leave in September.")))
        blocks = [b["block_id"] for b in answer(stack, run, token)["blocks"]]
        private_block = blocks[1]

        receipts: list[dict[str, Any]] = []
        page.on("response", lambda r: receipts.append(json.loads(r.request.post_data or "{}"))
                if r.url.endswith("/receipts") and r.status == 202 else None)
        page.goto(f"{stack.base_url}/#run={run}&token={token}")
        page.wait_for_function("() => window.imprintClient && window.imprintClient.done"
                               " && window.imprintClient.conversation.connections >= 1")
        page.wait_for_function("ids => JSON.stringify(Array.from(document.querySelectorAll('#blocks .block'))"
                               ".map(e => e.dataset.blockId)) === JSON.stringify(ids)", arg=blocks)
        client_id = page.evaluate("() => window.imprintClient.clientId")
        deadline = time.monotonic() + 15
        while not any(r.get("type") == "client.rendered" and private_block in r.get("block_ids", ()) for r in receipts):
            assert time.monotonic() < deadline, f"the page never reported the block rendered: {receipts}"
            page.wait_for_timeout(50)
        page.evaluate("id => { document.querySelector(`[data-block-id='${id}']`).__marker = 'same-node'; }",
                      private_block)

        assert page.get_attribute(f"[data-block-id='{private_block}']", "data-status") == "saved", \
            "nothing is struck before its source is revoked"
        off_thread(revoke(isolated, SourceRevoked(source_id=PRIVATE, account_id=ACCOUNT, reason="the owner withdrew it")))
        struck = f"[data-block-id='{private_block}'][data-status='withdrawn']"
        page.wait_for_selector(struck, timeout=60_000)

        assert page.evaluate("id => document.querySelector(`[data-block-id='${id}']`).__marker",
                             private_block) == "same-node", "marked in place"
        assert "withdrawn" in page.inner_text(f"{struck} .badges")
        assert "its source was revoked" in page.inner_text(struck)
        assert "diary saw them" not in page.inner_text("#blocks"), "what it said is no longer shown"
        assert page.get_attribute(f"[data-block-id='{blocks[0]}']", "data-status") == "saved"
        state = page.evaluate("() => ({errors: window.imprintClient.errors, validated: window.imprintClient.validated,"
                              " notices: window.imprintClient.notices.last})")
        assert state == {"errors": [], "validated": True, "notices": 1}, "the run's stream still checks (D3)"
        assert page.errors == []  # type: ignore[attr-defined]

        # The report: this page's client rendered revision 1 of the block and received its withdrawal.
        operator = mint_operator_token(isolated, "ops-1")
        deadline = time.monotonic() + 15
        while True:
            report = httpx.get(f"{stack.base_url}/v1/operator/runs/{run}/seen",
                               headers={"Authorization": f"Bearer {operator}"}).json()
            entries = [w for w in report["withdrawals"] if w["block_id"] == private_block]
            mine = [s for w in entries for s in w["seen_by"] if s["client_id"] == client_id]
            if mine and mine[0]["received_withdrawal"]:
                break
            assert time.monotonic() < deadline, f"the report never said the page received it: {report}"
            time.sleep(0.2)
        [entry] = entries
        assert entry["told"] == {"via": "notice", "notice_id": 1} and entry["cause"] == "source_revoked"
        assert [(s["client_id"], s["revision"]) for s in entry["seen_by"]] == [(client_id, 1)]
        assert mine[0]["rendered_at"] <= mine[0]["received_at"]
        assert report["outstanding"] == 0

        notices, _ = read_notices(stack.base_url, f"conv-{run}", token, until=lambda fs: len(fs) >= 1)

        # The same report on the operator page, and in `imprint inspect` beside the run's timeline.
        page.goto(f"{stack.base_url}/operator#run={run}&token={operator}")
        row = page.locator(f"#seen-rows tr[data-client-id='{client_id}']")
        row.wait_for()
        assert row.get_attribute("data-block-id") == private_block and row.get_attribute("data-received") == "received"
        assert "notice 1" in row.inner_text() and "source_revoked" in row.inner_text()
        shown = page.inner_text("#seen")
        inspected = console(isolated, "inspect", "--run", run)
        assert inspected.returncode == 0, inspected.stderr
        assert "Withdrawn blocks: who saw them" in inspected.stdout and client_id[:13] in inspected.stdout
        assert "every client that rendered a withdrawn block received its withdrawal" in inspected.stdout
        document = json.loads(console(isolated, "inspect", "--run", run, "--json").stdout)
        assert document["seen"]["withdrawals"] == report["withdrawals"]
        for text in (json.dumps(report), shown, inspected.stdout, *(n.data for n in notices)):
            assert PRIVATE not in text and TITLE not in text and "diary" not in text.lower()

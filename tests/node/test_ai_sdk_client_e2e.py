"""The whole stack as processes (Publication, relay, Journal, Delivery) over real
Kafka and PostgreSQL, and the AI SDK's own client in Node: readers open the UI
message stream *before* the run is admitted (Delivery waits for the run instead of
answering 404), then a runtime writes three blocks through entry B, revises the first
with ``replaces`` (P12), a source revocation withdraws the second (P21), and the run
completes. Every ``ai`` line ends with the same message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from imprint.contracts.runtime import AnswerPart, EvidenceItem, QuestionConditionSet
from imprint.contracts.sources import SourceRevoked
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.node.conftest import LINES, start_reader
from tests.support.kafka import produce, read_topic
from tests.support.net import connections_to
from tests.support.runs import admitted, completed, granted, opened
from tests.support.stack import Stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ACCOUNT = "acct-ai-sdk"
PUBLIC, PRIVATE = "src-public-handbook", "src-private-notes"
ANSWER = "Water boils at 100 °C at sea level and lower at altitude."


def part(run: str, call: str, markdown: str, **arguments: Any) -> AnswerPart:
    return AnswerPart(run_id=run, turn_id=f"turn-{call}", tool_call_id=call, sealed=True,
                      arguments={"markdown": markdown, **arguments})


def published(settings: Settings, run: str, until: Any) -> list[dict[str, Any]]:
    values = asyncio.run(read_topic(settings, Topic.PUBLICATION, timeout=60,
                                    until=lambda vs: until([v for v in vs if v.get("run_id") == run])))
    return [v for v in values if v.get("run_id") == run]


@pytest.mark.rule("P1")
@pytest.mark.rule("P12")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
@pytest.mark.rule("D6")
def test_the_ai_sdk_client_follows_a_run_it_opened_before_the_run_was_known(isolated: Settings) -> None:
    run, token = "run-ai-sdk-e2e", mint_token(isolated, ACCOUNT)
    with Stack(isolated) as stack:
        api = f"{stack.base_url}/v1/ai-sdk/runs"
        readers = [start_reader(line, api, run, token) for line in LINES]
        # the readers are connected, and Delivery has not heard of the run (nobody sent it yet)
        wait_until(lambda: connections_to(isolated.http_port) >= len(readers) or any(r.exited() for r in readers),
                   "the readers connected to Delivery", timeout=60)
        assert not any(r.exited() for r in readers), [r.result() for r in readers if r.exited()]
        asyncio.run(produce(isolated, Topic.RUNTIME,
            *opened(admitted(run, account_id=ACCOUNT, question="At what temperature does water boil?",
                             qcs=QuestionConditionSet(qcs_id="q"))),
            granted(run, PUBLIC, scope="public", owner_account_id="registry", title="Handbook"),
            granted(run, PRIVATE, scope="private", owner_account_id=ACCOUNT, title="Field notes"),
            part(run, "call-1", f"Water boils at 100 °C [[cite:{PUBLIC}]]."),
            part(run, "call-2", f"My notes say the same [[cite:{PRIVATE}]]."),
            part(run, "call-3", "At altitude it boils lower.")))
        first = published(stack.settings, run, lambda vs: sum(v["type"] == "answer.published" for v in vs) >= 3)
        ids = [v["block"]["block_id"] for v in first if v["type"] == "answer.published"]
        asyncio.run(produce(isolated, Topic.RUNTIME,
                            part(run, "call-4", f"Water boils at 100 °C at sea level [[cite:{PUBLIC}]].",
                                 replaces=ids[0])))
        asyncio.run(produce(isolated, Topic.SOURCES,
                            SourceRevoked(source_id=PRIVATE, account_id=ACCOUNT, reason="owner withdrew it")))
        published(stack.settings, run, lambda vs: any(v["type"] == "answer.withdrawn" for v in vs)
                  and any(v["type"] == "answer.published" and v["block"]["revision"] == 2 for v in vs))
        asyncio.run(produce(isolated, Topic.RUNTIME, completed(
            run, ANSWER, EvidenceItem(source_id=PUBLIC, title="Handbook", excerpt="100 °C"))))
        results = {reader.line: reader.result(timeout=120) for reader in readers}

    messages = []
    for line, result in results.items():
        assert result["status"] == "finished" and result["errors"] == [], result
        message = result["message"]
        blocks = [p for p in message["parts"] if p["type"] == "data-block"]
        assert [p["id"] for p in blocks] == ids, f"{line}: one part per block, in order"
        data = [p["data"] for p in blocks]
        assert [d["state"] for d in data] == ["committed", "withdrawn", "committed"]
        assert data[0]["revision"] == 2 and data[0]["markdown"] == f"Water boils at 100 °C at sea level [[cite:{PUBLIC}]]."
        assert data[0]["citations"] == [{"source_id": PUBLIC, "status": "valid"}]
        assert data[1]["cause"] == "source_revoked" and data[1].get("markdown") is None
        shown = [d for d in data if d["state"] == "committed"]
        assert [d["ordinal"] for d in shown] == sorted(d["ordinal"] for d in shown), "block texts in ordinal order"
        assert [d["markdown"] for d in shown][1] == "At altitude it boils lower."
        assert [p["text"] for p in message["parts"] if p["type"] == "text"] == [ANSWER]
        assert PRIVATE not in str(message), "the revoked private source is never named (D6)"
        messages.append(message)
    assert messages[0] == messages[1] == messages[2], "5.x, 6.x and 7.x build the same message"

"""The Vercel AI SDK's own client (``ai`` 5.x, 6.x and 7.x from npm) reads a run from
Delivery's UI message stream, unmodified: ``DefaultChatTransport``'s resume request
and ``readUIMessageStream``, with the SDK's own SSE/JSON parsing and part validation
(5.x and 6.x at these versions validate every part strictly). Over real PostgreSQL,
HTTP and Kafka (the delivery facts)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.delivery.support import Delivery
from tests.node.conftest import LINES, start_reader
from tests.support.waiting import wait_until
from tests.support.delivery_builders import closed, preview, published, running, settled, withdrawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CLOSED_TEXT = "Water boils at 100 °C at sea level; at altitude it boils lower, because the pressure is lower."


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == "data-block"]


def wait_following(delivery: Delivery, readers: list[Any]) -> None:
    """Until Delivery holds every reader on the live run (waiting for it or subscribed);
    a reader that exited meanwhile fails the test with what it printed."""
    wait_until(lambda: delivery.notifier.waiting() + delivery.notifier.subscribers() >= len(readers)
               or any(r.exited() for r in readers), "every reader to be following the live run")
    for reader in readers:
        assert not reader.exited(), reader.result()


def assert_final_message(result: dict[str, Any], run: str) -> None:
    assert result["status"] == "finished" and result["errors"] == [], result
    message = result["message"]
    assert message["id"] == f"imprint-run-{run}" and message["role"] == "assistant"
    parts = blocks(message)
    assert [p["id"] for p in parts] == ["b1", "b2", "b3"], "one part per block, in the order blocks appeared"
    data = {p["id"]: p["data"] for p in parts}
    # P18: the revised block once, in place, with its latest body
    assert data["b1"]["state"] == "committed" and data["b1"]["revision"] == 2
    assert data["b1"]["markdown"] == "Boiling point, revised: 100 °C [[cite:src-1]]."
    assert data["b1"]["citations"] == [{"source_id": "src-1", "status": "valid"}]
    assert data["b1"]["source_hint"] == "sources_verified"
    # P21: the withdrawn block marked withdrawn, its body gone, the source never named (D6)
    assert data["b2"]["state"] == "withdrawn" and data["b2"].get("markdown") is None
    assert "src-private" not in str(message)
    shown = [d for d in data.values() if d["state"] != "withdrawn"]
    assert [d["markdown"] for d in sorted(shown, key=lambda d: d["ordinal"])] == [
        d["markdown"] for d in shown], "block texts in ordinal order"
    assert [d["markdown"] for d in shown] == ["Boiling point, revised: 100 °C [[cite:src-1]].", "Third block."]
    # D5: the closed answer as one text part
    texts = [p for p in message["parts"] if p["type"] == "text"]
    assert [t["text"] for t in texts] == [CLOSED_TEXT]
    assert not [p for p in message["parts"] if p["type"] == "data-progress"], "progress is transient"
    metadata = message["metadata"]
    assert metadata["run"]["state"] == "completed" and metadata["run_id"] == run
    assert metadata["stream_summary"]["frame_count"] >= 6


@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
def test_the_ai_sdk_client_reads_a_run_as_one_message_of_every_line(delivery: Delivery) -> None:
    run, token = "run-ai-sdk", delivery.token()
    api = f"{delivery.url}/v1/ai-sdk/runs"
    delivery.feeder.send(running(run), preview(run, "b1", 1, "Boiling point: 100 °C.", 1),
                         published(run, "b1", 1, "Boiling point: 100 °C.", 1),
                         published(run, "b2", 1, "Built on a report that will be revoked.", 2))
    readers = [start_reader(line, api, run, token) for line in LINES]
    wait_following(delivery, readers)
    delivery.feeder.send(published(run, "b3", 1, "Third block.", 3),
                         published(run, "b1", 2, "Boiling point, revised: 100 °C [[cite:src-1]].", 1,
                                   citations=[{"source_id": "src-1", "status": "valid"}],
                                   source_hint="sources_verified"),
                         withdrawn(run, "b2", 1, "source_revoked", source_id="src-private-1"))
    delivery.feeder.send(settled(run), closed(run, CLOSED_TEXT))
    results = {reader.line: reader.result() for reader in readers}
    for line, result in results.items():
        assert result["package"] == line
        assert_final_message(result, run)
        print(f"{line} {result['version']} on Node {result['node']}: {len(result['message']['parts'])} parts, "
              f"{result['updates']} updates")
    assert results["ai7"]["node"].startswith("v22.")

    # The SDK sends no offset: a reader arriving after the end gets the whole message
    # again from `start` — the same message the live readers built.
    late = start_reader("ai6", api, run, token).result()
    assert_final_message(late, run)
    assert late["message"] == results["ai6"]["message"]
    assert delivery.store.run(run).delivery == "completed", "the UI stream records delivery like the SSE one"  # type: ignore[union-attr]


@pytest.mark.rule("D1")
@pytest.mark.rule("D6")
def test_the_sdk_resume_request_for_a_chat_replays_the_active_run_and_is_204_when_nothing_is_active(
    delivery: Delivery,
) -> None:
    run, conversation, token = "run-ai-sdk-resume", "conv-ai-sdk", delivery.token()
    api = f"{delivery.url}/v1/ai-sdk/conversations"
    delivery.feeder.send(running(run, conversation=conversation), published(run, "b1", 1, "First.", 1),
                         published(run, "b2", 1, "Built on a report that will be revoked.", 2),
                         published(run, "b3", 1, "Third block.", 3))
    reader = start_reader("ai5", api, conversation, token)
    wait_following(delivery, [reader])
    delivery.feeder.send(published(run, "b1", 2, "Boiling point, revised: 100 °C [[cite:src-1]].", 1,
                                   citations=[{"source_id": "src-1", "status": "valid"}],
                                   source_hint="sources_verified"),
                         withdrawn(run, "b2", 1, "source_revoked", source_id="src-private-1"),
                         settled(run), closed(run, CLOSED_TEXT, conversation=conversation))
    assert_final_message(reader.result(), run)
    # Nothing streams any more: the SDK's resume gets 204 and builds nothing; so does
    # another account, and a conversation that does not exist (D6: all alike).
    assert start_reader("ai6", api, conversation, token).result()["status"] == "no-active-stream"
    assert start_reader("ai6", api, conversation, delivery.token("acct-2")).result()["status"] == "no-active-stream"
    assert start_reader("ai6", api, "conv-missing", token).result()["status"] == "no-active-stream"

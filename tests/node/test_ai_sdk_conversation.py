"""D9 with the AI SDK's own client (``ai`` 5.x, 6.x and 7.x from npm): a front end on the
``ai`` package reads a conversation stream (``/v1/ai-sdk/conversations/{id}/events``) through
``DefaultChatTransport``'s resume request, and ``readUIMessageStream`` builds the conversation's
own message — one ``data-turn`` part per question, replaced in place as the Journal's facts
move it through the queue, and a ``data-notice`` part per notice. Resumed with
``Last-Event-ID``, it carries on after the entry it held. Real Delivery (uvicorn, the store on
SQLite and on PostgreSQL), Node and the SDK unmodified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.delivery.support import Delivery
from tests.node.conftest import HERE, LINES, start_script
from tests.support.delivery_builders import fact, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SCRIPT: Path = HERE / "read_conversation.mjs"
CONV = "conv-ai-turns"


def turns(message: dict[str, Any]) -> list[tuple[str, str, list[str] | None]]:
    return [(p["id"], p["data"]["kind"], p["data"]["queued"]) for p in message["parts"] if p["type"] == "data-turn"]


@pytest.mark.rule("D9")
@pytest.mark.rule("D1")
@pytest.mark.rule("X12")
def test_a_front_end_on_the_ai_package_reads_the_conversation_stream_as_one_message(delivery: Delivery) -> None:
    token = delivery.token()
    delivery.feeder.send(fact("question_started", "run-1", CONV, 1, running=["run-1"]),
                         fact("question_queued", "run-2", CONV, 2, running=["run-1"], queued=["run-2"]),
                         fact("question_ended", "run-1", CONV, 3, queued=["run-2"], end="answered",
                              state="completed"),
                         fact("question_started", "run-2", CONV, 4, running=["run-2"]))
    readers = [start_script(line, SCRIPT, delivery.url, CONV, token, "4") for line in LINES]
    messages = []
    for reader in readers:
        result = reader.result(timeout=90)
        assert result["status"] == "finished" and result["errors"] == [], result
        assert [e["id"] for e in result["entries"]] == ["run-1", "run-2", "run-1", "run-2"]
        message = result["message"]
        assert message["id"] == f"imprint-conversation-{CONV}"
        assert turns(message) == [("run-1", "ended", ["run-2"]), ("run-2", "started", [])], \
            f"{reader.line}: one part per question, replaced in place, in the order they were asked"
        messages.append(message)
    assert messages[0] == messages[1] == messages[2], "5.x, 6.x and 7.x end with the same message"

    delivery.feeder.send(fact("question_queued", "run-3", CONV, 5, running=["run-2"], queued=["run-3"]),
                         running("run-2", conversation=CONV))
    resumed = start_script("ai5", SCRIPT, delivery.url, CONV, token, "2", "4").result(timeout=60)
    assert resumed["status"] == "finished", resumed
    assert [e["id"] for e in resumed["entries"]] == ["run-3", "run-2"], "after entry 4: nothing missed, none repeated"
    assert [(p["id"], p["data"]["kind"]) for p in resumed["message"]["parts"] if p["type"] == "data-turn"] == [
        ("run-3", "queued"), ("run-2", "transition")]

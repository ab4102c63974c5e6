"""D7 with the AI SDK's own client (``ai`` 5.x, 6.x and 7.x from npm): a front end on the
``ai`` package learns that a block of a finished run was withdrawn from its conversation's
notices, read by ``DefaultChatTransport`` (its resume request, pointed at
``/v1/ai-sdk/conversations/{id}/notices``) and applied by ``readUIMessageStream`` to the
run's message — the SDK replaces the block's ``data-block`` part in place. Resumed with
``Last-Event-ID``, it misses nothing and repeats nothing. Real Delivery (uvicorn, the store
on SQLite and on PostgreSQL), Node and the SDK unmodified."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from imprint.delivery.feeds import notice_feed
from tests.integration.delivery.support import Delivery
from tests.node.conftest import HERE, LINES, Reader, start_script
from tests.support.delivery_builders import closed, published, running, settled, withdrawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SCRIPT: Path = HERE / "read_notices.mjs"
RUN, OTHER, CONV = "run-ai-notices", "run-ai-notices-2", "conv-ai-notices"
PRIVATE = "src-private-ledger-4"


def finished(run: str, *blocks: Any) -> list[Any]:
    return [running(run, conversation=CONV), *blocks, settled(run), closed(run, "Closed.", conversation=CONV)]


def following(delivery: Delivery, readers: list[Reader]) -> None:
    """Until every reader follows the conversation's notices live (it read the run first)."""
    deadline = time.monotonic() + 60
    while True:
        feed = delivery.notifier.feeds.get(notice_feed(CONV))
        if feed is not None and len(feed.subscriptions) >= len(readers):
            return
        for reader in readers:
            assert not reader.exited(), reader.result()
        assert time.monotonic() < deadline, "the readers never followed the notices"
        time.sleep(0.05)


def block_parts(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["id"], p["data"]["state"]) for p in message["parts"] if p["type"] == "data-block"]


@pytest.mark.rule("D7")
@pytest.mark.rule("D1")
@pytest.mark.rule("D6")
@pytest.mark.rule("P21")
def test_a_front_end_on_the_ai_package_marks_a_block_withdrawn_after_the_end_in_place(delivery: Delivery) -> None:
    token = delivery.token()
    delivery.feeder.send(*finished(RUN, published(RUN, "b1", 1, "Tides follow the moon.", 1),
                                   published(RUN, "b2", 1, f"The ledger says so [[cite:{PRIVATE}]].", 2,
                                             citations=[{"source_id": PRIVATE, "status": "valid"}]),
                                   published(RUN, "b3", 1, "Twice a day.", 3)))
    delivery.feeder.send(*finished(OTHER, published(OTHER, "c1", 1, "Another answer of the chat.", 1)))
    readers = [start_script(line, SCRIPT, delivery.url, RUN, CONV, token, "2") for line in LINES]
    following(delivery, readers)
    delivery.feeder.send(withdrawn(OTHER, "c1", 1, "source_tombstoned"))  # another message of the chat
    delivery.feeder.send(withdrawn(RUN, "b2", 1, "source_revoked", source_id=PRIVATE))
    results = {reader.line: reader.result(timeout=60) for reader in readers}

    messages = []
    for line, result in results.items():
        assert result["status"] == "finished" and result["errors"] == [], (line, result)
        assert [(n["id"], n["type"], n["data"]["notice_id"]) for n in result["notices"]] == [
            ("c1", "data-block", 1), ("b2", "data-block", 2)], line
        before, after = result["before"], result["message"]
        assert block_parts(before) == [("b1", "committed"), ("b2", "committed"), ("b3", "committed")]
        assert block_parts(after) == [("b1", "committed"), ("b2", "withdrawn"), ("b3", "committed")], \
            f"{line}: the SDK replaced the block's part in place; the other run's notice left this message alone"
        assert after["id"] == before["id"] == f"imprint-run-{RUN}"
        withdrawn_part = next(p for p in after["parts"] if p["type"] == "data-block" and p["id"] == "b2")
        assert withdrawn_part["data"]["cause"] == "source_revoked" and "markdown" not in withdrawn_part["data"]
        assert [p for p in after["parts"] if p["type"] != "data-block"] == [
            p for p in before["parts"] if p["type"] != "data-block"], "nothing else of the message changed"
        assert PRIVATE not in str(result["notices"]), "a notice names the cause, never the source (D6)"
        messages.append(after)
    assert messages[0] == messages[1] == messages[2], "5.x, 6.x and 7.x end with the same message"

    # A front end that comes back with the last notice it held misses nothing and repeats nothing.
    delivery.feeder.send(withdrawn(RUN, "b3", 1, "source_revoked"))  # while it was away
    resumed = start_script("ai5", SCRIPT, delivery.url, RUN, CONV, token, "1", "2").result(timeout=60)
    assert resumed["status"] == "finished", resumed
    assert [(n["id"], n["data"]["notice_id"]) for n in resumed["notices"]] == [("b3", 3)]
    assert block_parts(resumed["message"]) == [("b1", "committed"), ("b2", "withdrawn"), ("b3", "withdrawn")], \
        "the run's message read again already shows b2 withdrawn; the resumed notice withdraws b3"

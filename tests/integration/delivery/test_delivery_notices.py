"""D7 over real HTTP and stores: a withdrawal after a run's ``done`` reaches the clients of
its conversation as a notice, resumable with ``Last-Event-ID`` (no gap, no repeat), read
only by the conversation's account (D6), with nothing private in it; and Delivery can say
which clients rendered each withdrawn block revision and whether each received the
withdrawal."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from imprint.delivery.feeds import notice_feed
from services.common.settings import Settings
from services.delivery.operator import mint_operator_token
from tests.integration.delivery.support import Delivery, SSE, bearer, read_stream, start_delivery
from tests.support.delivery_builders import closed, deleted, published, running, settled, withdrawn
from tests.support.sse import read_notices

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = 2.0
PRIVATE = "src-private-field-notes-7"
SECRET = "Private claim from the field notes."


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    """The fallback check for a lost wake-up a minute away: within a test only the poll that
    wrote a notice can wake its followers."""
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 0.5,
                                                          "stream_open_wait_seconds": 0.1}), fallback_seconds=60)


@pytest.fixture
def waiting_delivery(isolated: Settings) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 0.5,
                                                          "stream_open_wait_seconds": WAIT}))


def finished(run: str, conversation: str, *blocks: Any, account: str = "acct-1") -> list[Any]:
    """A run of ``conversation`` with these blocks, ended (``done`` written)."""
    return [running(run, account=account, conversation=conversation), *blocks, settled(run),
            closed(run, "Closed.", account=account, conversation=conversation)]


class NoticeReader(threading.Thread):
    """A client following a conversation's notices in the background."""

    def __init__(self, delivery: Delivery, conversation: str, until: Callable[[list[SSE]], bool], **options: Any):
        super().__init__(daemon=True)
        self.delivery, self.conversation, self.until, self.options = delivery, conversation, until, options
        self.frames: list[SSE] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.frames, _ = read_notices(self.delivery.url, self.conversation, self.delivery.token(),
                                          until=self.until, timeout=30, **self.options)
        except BaseException as error:
            self.error = error

    def following(self) -> NoticeReader:
        """Started, and followed live by the notifier (its backlog read)."""
        self.start()
        deadline = time.monotonic() + 10
        while notice_feed(self.conversation) not in self.delivery.notifier.feeds:
            assert time.monotonic() < deadline and self.is_alive(), self.error or "the notices stream never opened"
            time.sleep(0.02)
        return self

    def result(self) -> list[SSE]:
        self.join(30)
        assert self.error is None, self.error
        return self.frames


def notices(frames: list[SSE]) -> list[tuple[int | None, str, str]]:
    return [(f.id, f.json["run_id"], f.json["block_id"]) for f in frames if f.event == "notice"]


@pytest.mark.rule("D7")
@pytest.mark.rule("D3")
@pytest.mark.rule("P21")
def test_a_withdrawal_after_the_end_reaches_the_open_conversation_as_a_notice(delivery: Delivery) -> None:
    conv = "conv-notices"
    delivery.feeder.send(*finished("run-n1", conv, published("run-n1", "b1", 1, "One.", 1),
                                   published("run-n1", "b2", 1, "Two.", 2), withdrawn("run-n1", "b2")))
    delivery.feeder.send(*finished("run-n2", conv, published("run-n2", "b3", 1, "Three.", 1)))
    reader = NoticeReader(delivery, conv, until=lambda fs: len(fs) >= 2).following()
    delivery.feeder.send(withdrawn("run-n1", "b1", 1, "source_revoked"))
    delivery.feeder.send(withdrawn("run-n2", "b3", 1, "source_tombstoned"))
    frames = reader.result()
    assert notices(frames) == [(1, "run-n1", "b1"), (2, "run-n2", "b3")], "numbered per conversation, live"
    assert [f.json for f in frames] == [
        {"notice_id": 1, "kind": "withdrawn", "run_id": "run-n1", "block_id": "b1", "revision": 1,
         "cause": "source_revoked", "at": frames[0].json["at"]},
        {"notice_id": 2, "kind": "withdrawn", "run_id": "run-n2", "block_id": "b3", "revision": 1,
         "cause": "source_tombstoned", "at": frames[1].json["at"]}]
    # b2 was withdrawn before done: its run's stream carried it, no notice was born for it.
    replay, ended = read_stream(delivery.url, "run-n1", delivery.token())
    assert ended and replay[-1].event == "done", "nothing follows done: the run's stream is unchanged in length"
    assert all(f.json.get("withdrawn") for f in replay if f.event.startswith("answer-") and
               f.json.get("block_id") == "b1"), "a client replaying the run never sees the withdrawn block"


@pytest.mark.rule("D7")
@pytest.mark.rule("D1")
@pytest.mark.rule("D8")
def test_a_notices_stream_resumed_with_last_event_id_misses_nothing_and_repeats_nothing(delivery: Delivery) -> None:
    conv = "conv-resume"
    blocks = [published("run-r", f"b{i}", 1, f"Block {i}.", i) for i in range(1, 7)]
    delivery.feeder.send(*finished("run-r", conv, *blocks))
    delivery.feeder.send(withdrawn("run-r", "b1"), withdrawn("run-r", "b2"))
    first, _ = read_notices(delivery.url, conv, delivery.token(), until=lambda fs: len(fs) >= 1)
    assert notices(first) == [(1, "run-r", "b1")]
    delivery.feeder.send(withdrawn("run-r", "b3"))  # while this client is away
    reader = NoticeReader(delivery, conv, until=lambda fs: len(fs) >= 3, last_event_id=first[-1].id).following()
    delivery.feeder.send(withdrawn("run-r", "b4"))
    resumed = reader.result()
    assert notices(resumed) == [(2, "run-r", "b2"), (3, "run-r", "b3"), (4, "run-r", "b4")]
    held = [f.id for f in first + resumed]
    assert held == [1, 2, 3, 4], "the backlog, then live: no gap and no repeat across the reconnect"
    # the query parameter resumes the same way; a later resume starts exactly after its id
    later, _ = read_notices(delivery.url, conv, delivery.token(), last_event_id=3, via_query=True,
                            until=lambda fs: len(fs) >= 1)
    assert [f.id for f in later] == [4]
    # D8: an id beyond the conversation's last notice starts over, saying so
    over, _ = read_notices(delivery.url, conv, delivery.token(), last_event_id=40, until=lambda fs: len(fs) >= 5)
    assert [(f.id, f.event) for f in over] == [(0, "reset"), (1, "notice"), (2, "notice"), (3, "notice"),
                                              (4, "notice")]
    assert over[0].json == {"reason": "beyond_last_frame", "last_event_id": 40, "last_id": 4}


@pytest.mark.rule("D7")
@pytest.mark.rule("D6")
def test_only_the_conversations_account_reads_its_notices_after_the_same_wait_as_a_run(
    waiting_delivery: Delivery,
) -> None:
    delivery, conv = waiting_delivery, "conv-isolated"
    delivery.feeder.send(*finished("run-i", conv, published("run-i", "b1", 1, SECRET, 1, citations=[
        {"source_id": PRIVATE, "status": "valid"}])))
    delivery.feeder.send(withdrawn("run-i", "b1", 1, "source_revoked", source_id=PRIVATE))
    stranger = delivery.token("acct-2")
    answers = []
    for conversation in ("conv-never", conv):
        for path in (f"/v1/conversations/{conversation}/notices", f"/v1/ai-sdk/conversations/{conversation}/notices"):
            started = time.monotonic()
            response = httpx.get(delivery.url + path, headers=bearer(stranger), timeout=10)
            answers.append((response.status_code, response.json()["detail"], time.monotonic() - started >= WAIT))
        ticket = httpx.post(f"{delivery.url}/v1/conversations/{conversation}/stream-tickets", headers=bearer(stranger),
                            timeout=10)
        assert ticket.status_code == 404
    assert {a[:2] for a in answers} == {(404, "conversation not found")}
    assert {a[2] for a in answers} == {True}, f"the 404 comes after the same wait, never sooner: {answers}"
    assert httpx.get(f"{delivery.url}/v1/conversations/{conv}/notices", timeout=10).status_code == 401

    # A ticket opens the notices of its conversation and nothing else; a run's ticket never opens them.
    token = delivery.token()
    minted = httpx.post(f"{delivery.url}/v1/conversations/{conv}/stream-tickets", headers=bearer(token)).json()
    assert minted["notices_url"].startswith(f"/v1/conversations/{conv}/notices?ticket=")
    frames, _ = read_notices(delivery.url, conv, None, ticket=minted["ticket"], until=lambda fs: len(fs) >= 1)
    assert notices(frames) == [(1, "run-i", "b1")]
    run_ticket = httpx.post(f"{delivery.url}/v1/runs/run-i/stream-tickets", headers=bearer(token)).json()["ticket"]
    assert httpx.get(f"{delivery.url}/v1/conversations/{conv}/notices?ticket={run_ticket}").status_code == 401
    assert httpx.get(f"{delivery.url}/v1/runs/run-i/events?ticket={minted['ticket']}").status_code == 401

    # Nothing private in a notice, in either form: the cause, never the source, its title or the body.
    ui, _ = read_notices(delivery.url, conv, token, path="/v1/ai-sdk/conversations/{id}/notices",
                         until=lambda fs: len(fs) >= 1)
    for frame in (*frames, *ui):
        assert PRIVATE not in frame.data and SECRET not in frame.data and "field notes" not in frame.data.lower()
    assert json.loads(ui[0].data)["data"]["cause"] == "source_revoked"


@pytest.mark.rule("D7")
@pytest.mark.rule("D4")
@pytest.mark.rule("D6")
def test_the_report_says_who_rendered_each_withdrawn_revision_and_whether_each_received_the_withdrawal(
    delivery: Delivery,
) -> None:
    run, conv, token = "run-seen", "conv-seen", delivery.token()

    def receipt(**body: Any) -> None:
        response = httpx.post(f"{delivery.url}/v1/runs/{run}/receipts", headers=bearer(token), json=body, timeout=10)
        assert response.status_code == 202, response.text

    delivery.feeder.send(running(run, conversation=conv), published(run, "b1", 1, SECRET, 1),
                         published(run, "b2", 1, "Two.", 2), published(run, "b3", 1, "Three.", 3))
    receipt(type="client.rendered", last_event_id=4, block_ids=["b1", "b2", "b3"], client_id="page-old",
            revisions={"b1": 1, "b2": 1, "b3": 1})
    receipt(type="client.received", last_event_id=4, client_id="page-old")
    delivery.feeder.send(published(run, "b1", 2, SECRET + " Revised.", 1), withdrawn(run, "b3"))
    withdrawn_frame = read_stream(delivery.url, run, token, until=lambda fs: any(
        f.event == "answer-withdrawn" for f in fs))[0][-1].id
    receipt(type="client.rendered", last_event_id=withdrawn_frame, block_ids=["b1", "b2"], client_id="page-new",
            revisions={"b1": 2, "b2": 1})
    receipt(type="client.received", last_event_id=withdrawn_frame, client_id="page-new")
    receipt(type="client.rendered", last_event_id=withdrawn_frame, block_ids=["b1"])  # a client with no name
    delivery.feeder.send(settled(run), closed(run, "Closed.", conversation=conv))
    delivery.feeder.send(withdrawn(run, "b1", 2, "source_revoked", source_id=PRIVATE))
    receipt(type="client.received", client_id="page-new", notice_ids=[1])
    receipt(type="client.received", client_id="page-new", notice_ids=[1])  # again: nothing new

    operator = mint_operator_token(delivery.settings, "ops-1")
    report = httpx.get(f"{delivery.url}/v1/operator/runs/{run}/seen", headers=bearer(operator)).json()
    by_block = {w["block_id"]: w for w in report["withdrawals"]}
    assert list(by_block) == ["b3", "b1"], "in the order they were told"
    b3, b1 = by_block["b3"], by_block["b1"]
    assert b3["told"] == {"via": "stream", "frame_id": withdrawn_frame} and b3["revision"] == 1
    assert [(s["client_id"], s["revision"], s["received_withdrawal"]) for s in b3["seen_by"]] == [
        ("page-old", 1, False)], "page-old rendered b3 and never reported the frame that withdrew it"
    assert b1["told"] == {"via": "notice", "notice_id": 1} and (b1["revision"], b1["cause"]) == (2, "source_revoked")
    seen = {s["client_id"]: s for s in b1["seen_by"]}
    assert set(seen) == {"page-old", "page-new", None}
    assert (seen["page-new"]["revision"], seen["page-new"]["received_withdrawal"]) == (2, True)
    assert seen["page-new"]["received_at"] >= seen["page-new"]["rendered_at"]
    assert (seen["page-old"]["revision"], seen["page-old"]["received_withdrawal"]) == (1, False), \
        "it saw revision 1 of the withdrawn claim and was never told"
    assert seen[None]["received_withdrawal"] is None, "a client that never named itself cannot be asked"
    assert (report["outstanding"], report["unknown"], report["clients"]) == (2, 1, 2) and report["conversation_id"] == conv
    blob = json.dumps(report)
    assert PRIVATE not in blob and SECRET not in blob, "ids, revisions, causes and times only"
    # an audit reads it as JSON; an ordinary account cannot
    assert httpx.get(f"{delivery.url}/v1/operator/runs/{run}/seen", headers=bearer(token)).status_code == 404
    assert httpx.get(f"{delivery.url}/v1/operator/runs/run-none/seen", headers=bearer(operator)).status_code == 404
    bad = httpx.post(f"{delivery.url}/v1/runs/{run}/receipts", headers=bearer(token),
                     json={"type": "client.rendered", "notice_ids": [1]})
    assert bad.status_code == 422, "a notice is received, never rendered"


@pytest.mark.rule("D7")
@pytest.mark.rule("X8")
@pytest.mark.rule("D6")
def test_a_deleted_conversations_notices_stream_ends_and_is_then_404(delivery: Delivery) -> None:
    conv = "conv-deleted"
    delivery.feeder.send(*finished("run-d", conv, published("run-d", "b1", 1, "One.", 1)))
    delivery.feeder.send(withdrawn("run-d", "b1"))
    reader = NoticeReader(delivery, conv, until=lambda fs: False).following()
    delivery.feeder.send(deleted("run-d", conv))
    reader.join(10)
    assert not reader.is_alive() and reader.error is None, "the stream of a deleted conversation ends"
    assert notices(reader.frames) == [(1, "run-d", "b1")]
    response = httpx.get(f"{delivery.url}/v1/conversations/{conv}/notices", headers=bearer(delivery.token()))
    assert response.status_code == 404

"""The HTTP app in-process (httpx ASGITransport) with a collecting fake ``publish``:
auth and isolation (D6), receipts and cancel (D4/D2), limits, the observer (D4)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from imprint.contracts.base import Message
from imprint.delivery.summary import validate_stream
from services.common.settings import Settings
from services.common.inbound import Inbound
from imprint.contracts.registry import topic_of
from services.delivery.app import create_app
from services.delivery.auth import RateLimiter, mint_token, verify_token
from services.delivery.metrics import DeliveryMetrics
from services.delivery.notifier import Notifier
from services.delivery.observer import DeliveryRecorder
from services.delivery.stream import DeliveryReport, EventStream, StreamConfig
from imprint.delivery.frames import Frame
from imprint.delivery.tickets import Grant, TicketBook
from imprint.delivery.ui_message_stream import UIMessageStream
from services.delivery.view_store import ViewStore
from tests.integration.delivery.support import SSE, parse_sse
from tests.support.delivery_builders import (
    closed,
    preview,
    progress,
    published,
    rejected,
    running,
    settled,
    withdrawn,
)

RUN = "run-u"


class Collect:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        topic_of(message)  # every message Delivery sends has a topic
        self.messages.append(message)

    def types(self) -> list[str]:
        return [m.type for m in self.messages]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", database_url=None, max_request_bytes=2048,
                    stream_open_wait_seconds=0.3)


@pytest.fixture
def store(settings: Settings) -> Iterator[ViewStore]:
    s = ViewStore(settings)
    offsets = {"p": 0, "r": 0}

    def feed(*messages: Any) -> None:
        batch = []
        for m in messages:
            key = "r" if m.type.startswith("run.") else "p"
            batch.append(Inbound(f"imprint.{'runs' if key == 'r' else 'publication'}.v1", 0, offsets[key], m))
            offsets[key] += 1
        s.process(batch)

    s.feed = feed  # type: ignore[attr-defined]
    yield s
    s.close()


@pytest.fixture
def publish() -> Collect:
    return Collect()


@pytest.fixture
async def client(settings: Settings, store: ViewStore, publish: Collect) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, store, publish, notifier=Notifier(), rate_limit=(8, 60.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://delivery") as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


def auth(settings: Settings, account: str = "acct-1") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(settings, account)}"}


# ---------------------------------------------------------------------- tokens


@pytest.mark.rule("D6")
def test_tokens_are_hs256_with_sub_and_exp(settings: Settings) -> None:
    token = mint_token(settings, "acct-1", 60)
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "HS256" and claims["sub"] == "acct-1" and claims["exp"] > time.time()
    assert verify_token(settings, token) == "acct-1"
    assert verify_token(settings, mint_token(settings, "acct-2", ttl_seconds=60)) == "acct-2"


@pytest.mark.rule("D6")
@pytest.mark.parametrize("token", [
    "not-a-jwt",
    jwt.encode({"sub": "acct-1"}, "imprint-development-secret-change-me", algorithm="HS256"),  # no exp
    jwt.encode({"sub": "acct-1", "exp": int(time.time()) - 5}, "imprint-development-secret-change-me",
               algorithm="HS256"),  # expired
    jwt.encode({"sub": "acct-1", "exp": int(time.time()) + 60}, "another-secret-that-is-long-enough-for-hs256", algorithm="HS256"),
    jwt.encode({"sub": "acct-1", "exp": int(time.time()) + 60}, None, algorithm="none"),
    jwt.encode({"exp": int(time.time()) + 60}, "imprint-development-secret-change-me", algorithm="HS256"),  # no sub
], ids=["not-a-jwt", "no-exp", "expired", "other-secret", "alg-none", "no-sub"])  # stable ids: every worker collects the same tests
async def test_bad_tokens_are_401(client: httpx.AsyncClient, store: ViewStore, token: str) -> None:
    store.feed(running(RUN))  # type: ignore[attr-defined]
    response = await client.get(f"/v1/runs/{RUN}", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.rule("D6")
async def test_missing_token_is_401_on_every_private_route(client: httpx.AsyncClient) -> None:
    for method, path in [("GET", f"/v1/runs/{RUN}"), ("GET", f"/v1/runs/{RUN}/answer"),
                         ("GET", f"/v1/runs/{RUN}/events"), ("POST", f"/v1/runs/{RUN}/cancel"),
                         ("POST", f"/v1/runs/{RUN}/receipts"), ("GET", "/v1/conversations/c/history"),
                         ("DELETE", "/v1/conversations/c")]:
        assert (await client.request(method, path)).status_code == 401, path


@pytest.mark.rule("D6")
async def test_another_accounts_run_and_a_missing_run_are_the_same_404(
    client: httpx.AsyncClient, store: ViewStore, settings: Settings,
) -> None:
    store.feed(running(RUN, account="acct-1"), published(RUN, "b1", 1, "mine"))  # type: ignore[attr-defined]
    other = auth(settings, "acct-2")
    for path in (f"/v1/runs/{RUN}", f"/v1/runs/{RUN}/answer", f"/v1/runs/{RUN}/events"):
        foreign = await client.get(path, headers=other)
        missing = await client.get(path.replace(RUN, "run-nope"), headers=other)
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
    assert (await client.post(f"/v1/runs/{RUN}/cancel", headers=other)).status_code == 404
    assert (await client.get(f"/v1/conversations/conv-{RUN}/history", headers=other)).status_code == 404
    assert (await client.delete(f"/v1/conversations/conv-{RUN}", headers=other)).status_code == 404


@pytest.mark.rule("D6")
async def test_a_run_whose_account_is_not_known_yet_is_404_for_everyone(
    client: httpx.AsyncClient, store: ViewStore, settings: Settings,
) -> None:
    store.feed(published(RUN, "b1", 1, "publication before the journal"))  # type: ignore[attr-defined]
    assert (await client.get(f"/v1/runs/{RUN}", headers=auth(settings))).status_code == 404


# ---------------------------------------------------------------------- routes


@pytest.mark.rule("D4")
async def test_receipts_are_published_as_client_observations_with_the_token_account(
    client: httpx.AsyncClient, store: ViewStore, publish: Collect, settings: Settings,
) -> None:
    store.feed(running(RUN), published(RUN, "b1", 1, "v1"))  # type: ignore[attr-defined]
    for kind in ("client.received", "client.rendered", "client.conflict"):
        response = await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings),
                                     json={"type": kind, "last_event_id": 2, "block_ids": ["b1"], "detail": "x"}
                                     if kind == "client.conflict" else
                                     {"type": kind, "last_event_id": 2, "block_ids": ["b1"]})
        assert response.status_code == 202, response.text
    assert publish.types() == ["client.received", "client.rendered", "client.conflict"]
    assert {m.account_id for m in publish.messages} == {"acct-1"}  # type: ignore[attr-defined]
    assert {topic_of(m) for m in publish.messages} == {"imprint.delivery.v1"}
    bad = await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings),
                            json={"type": "client.rendered", "last_event_id": 99})
    assert bad.status_code == 422, "a receipt for a frame never sent is refused"
    spoof = await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings),
                              json={"type": "client.rendered", "account_id": "acct-2"})
    assert spoof.status_code == 422
    assert (await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings),
                              json={"type": "delivery.completed"})).status_code == 422


@pytest.mark.rule("D2")
async def test_cancel_publishes_run_cancel_requested_and_not_after_the_end(
    client: httpx.AsyncClient, store: ViewStore, publish: Collect, settings: Settings,
) -> None:
    store.feed(running(RUN))  # type: ignore[attr-defined]
    response = await client.post(f"/v1/runs/{RUN}/cancel", headers=auth(settings))
    assert response.status_code == 202
    assert publish.types() == ["run.cancel_requested"]
    assert topic_of(publish.messages[0]) == "imprint.control.v1"
    store.feed(settled(RUN), closed(RUN))  # type: ignore[attr-defined]
    assert (await client.post(f"/v1/runs/{RUN}/cancel", headers=auth(settings))).status_code == 409
    assert publish.types() == ["run.cancel_requested"]


@pytest.mark.rule("X11")
@pytest.mark.rule("P14")
async def test_the_cancel_answer_names_the_committed_block_revisions_the_user_keeps(
    client: httpx.AsyncClient, store: ViewStore, publish: Collect, settings: Settings,
) -> None:
    committed = [published(RUN, "b1", 1, "First, saved.", 1), published(RUN, "b2", 1, "Second, saved.", 2),
                 published(RUN, "b2", 2, "Second, revised and saved.", 2)]
    store.feed(running(RUN), *committed,  # type: ignore[attr-defined]
               preview(RUN, "b1", 2, "A revision of the first, only previewed.", 1),
               preview(RUN, "b3", 1, "A third, only previewed.", 3),
               published(RUN, "b4", 1, "Saved, then withdrawn.", 4), withdrawn(RUN, "b4", 1))
    response = await client.post(f"/v1/runs/{RUN}/cancel", headers=auth(settings))
    assert response.status_code == 202
    kept = response.json()["kept"]
    newest = {m.block.block_id: m.block for m in committed}  # the newest committed revision of each block
    assert kept["blocks"] == [
        {"block_id": b.block_id, "revision": b.revision, "delivery_ordinal": b.delivery_ordinal,
         "body_sha256": b.body_sha256, "receipt_id": b.receipt.receipt_id} for b in newest.values()], \
        "each block's newest committed revision; a preview (new or over a saved revision) and a withdrawn block are not kept"
    assert kept["as_of_event_id"] == store.run(RUN).last_frame_id  # type: ignore[union-attr]


@pytest.mark.rule("X8")
async def test_delete_conversation_is_owner_only_and_publishes_the_request(
    client: httpx.AsyncClient, store: ViewStore, publish: Collect, settings: Settings,
) -> None:
    store.feed(running(RUN, conversation="conv-9"))  # type: ignore[attr-defined]
    response = await client.delete("/v1/conversations/conv-9", headers=auth(settings))
    assert response.status_code == 202
    [message] = publish.messages
    assert message.type == "conversation.delete_requested"
    assert (message.conversation_id, message.account_id, message.reason) == ("conv-9", "acct-1", "user")  # type: ignore[attr-defined]


@pytest.mark.rule("D6")
async def test_request_size_limit_and_rate_limit(client: httpx.AsyncClient, store: ViewStore,
                                                 settings: Settings) -> None:
    store.feed(running(RUN))  # type: ignore[attr-defined]
    big = await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings),
                            content=b'{"type":"client.received","detail":"' + b"x" * 4000 + b'"}')
    assert big.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 500

    chunked = await client.post(f"/v1/runs/{RUN}/receipts", headers=auth(settings), content=chunks())
    assert chunked.status_code == 413
    statuses = [(await client.post(f"/v1/runs/{RUN}/cancel", headers=auth(settings, "acct-rl"))).status_code
                for _ in range(10)]
    assert statuses[-1] == 429, statuses


@pytest.mark.rule("D6")
def test_rate_limiter_refills() -> None:
    limiter = RateLimiter(rate=2, per=0.2)
    assert limiter.allow("a")[0] and limiter.allow("a")[0]
    allowed, retry = limiter.allow("a")
    assert not allowed and retry > 0
    assert limiter.allow("b")[0], "buckets are per account"
    time.sleep(0.25)
    assert limiter.allow("a")[0]


@pytest.mark.rule("D4")
async def test_health_ready_metrics_and_the_web_client(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["store"] is True
    client.app.state.caught_up = lambda: False  # type: ignore[attr-defined]
    assert (await client.get("/readyz")).status_code == 503
    metrics = (await client.get("/metrics")).text
    assert "imprint_delivery_frames_sent_total" in metrics and "imprint_delivery_conflicts_total" in metrics
    index = await client.get("/")
    assert index.status_code == 200 and "script-src 'self'" in index.headers["content-security-policy"]
    assert (await client.get("/static/app.js")).status_code == 200


@pytest.mark.rule("R8")
async def test_metrics_name_the_fields_of_a_newer_contract_a_consumer_ignored(client: httpx.AsyncClient) -> None:
    from services.common.evolution import record_unknown_fields

    record_unknown_fields("delivery-r8", "imprint.publication.v1", "answer.published", ["block.lang"])
    metrics = (await client.get("/metrics")).text
    assert ('imprint_wire_unknown_fields_total{consumer="delivery-r8",field="block.lang",'
            'topic="imprint.publication.v1",type="answer.published"} 1.0') in metrics
    assert "imprint_delivery_frames_sent_total" in metrics, "beside Delivery's own"


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D4")
async def test_a_finished_run_streams_to_done_and_records_completed(
    client: httpx.AsyncClient, store: ViewStore, publish: Collect, settings: Settings,
) -> None:
    store.feed(running(RUN), published(RUN, "b1", 1, "v1"), settled(RUN), closed(RUN, "z" * 60))  # type: ignore[attr-defined]
    response = await client.get(f"/v1/runs/{RUN}/events", headers=auth(settings))
    assert response.headers["content-type"].startswith("text/event-stream")
    frames: list[SSE] = []
    parse_sse(iter(response.text.split("\n")), lambda f: frames.append(f) or False)
    assert validate_stream([(f.id, f.event, f.json if f.event != "done" else f.data) for f in frames]).ok
    assert publish.types() == ["delivery.sent", "delivery.completed"]
    assert publish.messages[1].last_event_id == frames[-1].id  # type: ignore[attr-defined]
    assert store.run(RUN).delivery == "completed"  # type: ignore[union-attr]
    resumed = await client.get(f"/v1/runs/{RUN}/events", headers={**auth(settings), "Last-Event-ID": "3"})
    ids = [int(line[4:]) for line in resumed.text.split("\n") if line.startswith("id: ")]
    assert ids == list(range(4, frames[-1].id + 1 if frames[-1].id else 0))
    after = await client.get(f"/v1/runs/{RUN}/events?last_event_id={frames[-1].id}", headers=auth(settings))
    assert "id:" not in after.text
    assert publish.types().count("delivery.completed") == 2, "a resume past the terminal records nothing"
    for bad in ("x", "-1"):
        refused = await client.get(f"/v1/runs/{RUN}/events", headers={**auth(settings), "Last-Event-ID": bad})
        assert refused.status_code == 400 and refused.json()["detail"] == "Last-Event-ID must be a frame id"


# ---------------------------------------------------------------------- observer


def written(events: list[str], *, finish: bool, end_reason: str | None = None,
            disconnect_first: bool = False) -> DeliveryReport:
    """What a stream's report holds after writing ``events`` (ids 1..n), the client
    perhaps leaving, then perhaps the final body going out."""
    report = DeliveryReport(run_id=RUN, account_id="acct-1", connection_id="conn-1")
    report.end_reason = end_reason
    for frame_id, event in enumerate(events, start=1):
        report.wrote(Frame(run_id=RUN, id=frame_id, event=event, data={}, body_sha256=""))
    if disconnect_first:
        report.client_left()
    if finish:
        report.response_finished()
    return report


async def observe(report: DeliveryReport) -> tuple[list[str], list[tuple[str, str]]]:
    published: list[Message] = []
    recorded: list[tuple[str, str]] = []

    async def publish(m: Message) -> None:
        published.append(m)

    async def record(run_id: str, outcome: str) -> None:
        recorded.append((run_id, outcome))

    await DeliveryRecorder(publish=publish, record=record, metrics=DeliveryMetrics())(report)
    return [m.type for m in published], recorded


DONE = "done"
FRAME = "progress"


@pytest.mark.rule("D4")
async def test_observer_completed_needs_the_terminal_and_the_finished_response() -> None:
    assert await observe(written([FRAME, DONE], finish=True)) == (
        ["delivery.sent", "delivery.completed"], [(RUN, "completed")])
    assert await observe(written([FRAME, DONE], finish=False)) == (
        ["delivery.sent", "delivery.interrupted"], [(RUN, "interrupted")]), "terminal written, response not finished"
    assert await observe(written([FRAME], finish=True, end_reason="slow_client")) == (
        ["delivery.sent", "delivery.interrupted"], [(RUN, "interrupted")])


@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
async def test_observer_a_disconnect_before_the_end_is_an_interruption_never_a_completion() -> None:
    types, recorded = await observe(written([FRAME, DONE], finish=True, disconnect_first=True))
    assert "delivery.completed" not in types and "delivery.interrupted" in types
    assert recorded == [(RUN, "interrupted")]
    assert await observe(written([], finish=True, end_reason="nothing_more")) == ([], [])


@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
async def test_the_stream_reports_a_client_that_left_before_done_as_interrupted(
    store: ViewStore, settings: Settings,
) -> None:
    """The real EventStream over the store: the client leaves at once; what the stream
    reports (not bytes read back) is an interruption, never a completion."""
    store.feed(running(RUN), published(RUN, "b1", 1, "v1"))  # type: ignore[attr-defined]
    reports: list[DeliveryReport] = []

    async def report_to(report: DeliveryReport) -> None:
        reports.append(report)

    notifier = Notifier()
    notifier.bind()
    stream = EventStream(run_id=RUN, last_id=0, store=store, notifier=notifier, config=StreamConfig(poll_interval=0.05),
                         metrics=DeliveryMetrics(), report=DeliveryReport(RUN, "acct-1", "conn-1"), report_to=report_to)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.2)
        return {"type": "http.disconnect"}

    await asyncio.wait_for(stream({"type": "http"}, receive, send), 5)
    [report] = reports
    assert report.frames == 2 and report.last_event_id == 2 and not report.terminal_sent
    assert report.disconnected and report.outcome() == "interrupted"


# ---------------------------------------------------------------------- notifier


@pytest.mark.rule("D1")
async def test_notifier_wakes_waiters_and_never_loses_a_poke() -> None:
    notifier = Notifier()
    notifier.bind()
    seen = notifier.version("r")
    notifier.notify(["r"])  # before the wait: the version already moved
    assert await asyncio.wait_for(notifier.wait("r", seen, 5), 1) != seen
    seen = notifier.version("r")
    waiter = asyncio.create_task(notifier.wait("r", seen, 5))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(notifier.notify_threadsafe, ["r"])
    assert await asyncio.wait_for(waiter, 1) != seen
    assert notifier.waiting() == 0
    assert await notifier.wait("quiet", notifier.version("quiet"), 0.01) == 0


# ---------------------------------------------------------------------- stream tickets


@pytest.mark.rule("D6")
def test_a_stream_ticket_is_bound_to_its_run_and_expires_a_ttl_after_its_last_use() -> None:
    book = TicketBook(ttl=60.0)
    book.issue("t-1", Grant(account_id="acct-1", run_id="run-1"), now=1000.0)
    assert book.use("t-1", "run-2", now=1001.0) is None, "another run"
    assert book.use("t-unknown", "run-1", now=1001.0) is None
    assert book.use("t-1", "run-1", now=1059.0) == Grant("acct-1", "run-1")
    assert book.use("t-1", "run-1", now=1118.0) is not None, "each use extends its life (browser reconnects)"
    assert book.use("t-1", "run-1", now=1178.0) is None, "a minute after its last use it is gone"
    assert len(book) == 0
    book.issue("t-2", Grant("acct-1", "run-1"), now=0.0)
    assert "t-2" not in repr(book._grants), "only a hash of the ticket is held"


# ---------------------------------------------------------------------- the AI SDK mapping

# The keys each part type may carry: the strict schemas of ai 5.0.0 / 6.0.0
# (packages/ai/src/ui-message-stream/ui-message-chunks.ts, z.strictObject).
UI_PART_KEYS = {
    "start": {"type", "messageId", "messageMetadata"},
    "finish": {"type", "messageMetadata"},
    "message-metadata": {"type", "messageMetadata"},
    "text-start": {"type", "id", "providerMetadata"},
    "text-delta": {"type", "id", "delta", "providerMetadata"},
    "text-end": {"type", "id", "providerMetadata"},
    "source-document": {"type", "sourceId", "mediaType", "title", "filename", "providerMetadata"},
    "data-": {"type", "id", "data", "transient"},
}


def ui_parts(frames: list[Frame]) -> list[dict[str, Any]]:
    mapping = UIMessageStream(run_id=RUN, conversation_id="conv-u")
    parts = mapping.start()
    for frame in frames:
        parts += mapping.parts(frame)
    return parts


@pytest.mark.rule("D2")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
def test_every_frame_kind_maps_to_parts_a_strict_ai_sdk_client_accepts(store: ViewStore) -> None:
    store.feed(running(RUN), progress(RUN, "retrieval"),  # type: ignore[attr-defined]
               preview(RUN, "b1", 1, "draft"), published(RUN, "b1", 1, "one"), published(RUN, "b2", 1, "two", 2),
               published(RUN, "b1", 2, "one, revised"),
               withdrawn(RUN, "b2", 1, "source_revoked", source_id="src-x"),
               rejected(RUN, "tool:c9"),
               settled(RUN), closed(RUN, "z" * 40))
    frames = store.frames_after(RUN, 0, 1000)
    assert {f.event for f in frames} >= {"run-status", "progress", "answer-preview", "answer-publication",
                                         "answer-withdrawn", "answer-rejected", "content", "evidence-summary",
                                         "stream-summary", "done"}
    parts = ui_parts(frames)
    for part in parts:
        allowed = UI_PART_KEYS["data-" if part["type"].startswith("data-") else part["type"]]
        assert set(part) <= allowed, part
        json.dumps(part)
    assert parts[0]["type"] == "start" and parts[-1]["type"] == "finish"
    finals: dict[str, dict[str, Any]] = {}
    for part in parts:
        if part["type"] == "data-block":
            finals[part["id"]] = part["data"]  # what the SDK does: same type and id replace in place
    assert list(finals) == ["b1", "b2"]
    assert finals["b1"]["state"] == "committed" and finals["b1"]["markdown"] == "one, revised"
    assert finals["b2"] == {"block_id": "b2", "state": "withdrawn", "revision": 1, "cause": "source_revoked"}
    assert "src-x" not in json.dumps(parts), "a withdrawal never names its source (D6)"
    assert any(p["type"] == "data-rejection" and p["data"]["reason"] == "not_publishable" for p in parts)
    assert all(p.get("transient") for p in parts if p["type"] == "data-progress")
    text = "".join(p["delta"] for p in parts if p["type"] == "text-delta")
    assert text == "z" * 40
    assert parts[-1]["messageMetadata"]["run"]["state"] == "completed"


@pytest.mark.rule("D1")
def test_a_replay_and_a_live_reader_end_with_the_same_blocks(store: ViewStore) -> None:
    store.feed(running(RUN), published(RUN, "b1", 1, "one"))  # type: ignore[attr-defined]
    live = UIMessageStream(run_id=RUN)
    seen = live.start()
    seen += [p for f in store.frames_after(RUN, 0, 1000) for p in live.parts(f)]
    last = store.frames_after(RUN, 0, 1000)[-1].id
    store.feed(published(RUN, "b1", 2, "one, revised"), published(RUN, "b2", 1, "two", 2),  # type: ignore[attr-defined]
               settled(RUN), closed(RUN, "t"))
    seen += [p for f in store.frames_after(RUN, last, 1000) for p in live.parts(f)]
    replay = ui_parts(store.frames_after(RUN, 0, 1000))

    def final(parts: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in parts:
            if part["type"] == "data-block":
                out[part["id"]] = part["data"]
        return out

    assert final(seen) == final(replay) and list(final(replay)) == ["b1", "b2"]


@pytest.mark.rule("D6")
async def test_the_openapi_document_is_served_and_names_every_route_and_its_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"/v1/runs/{run_id}/events", "/v1/runs/{run_id}/stream-tickets", "/v1/ai-sdk/runs/{run_id}/stream",
            "/v1/ai-sdk/conversations/{conversation_id}/stream", "/v1/runs/{run_id}/answer",
            "/v1/runs/{run_id}/receipts", "/v1/runs/{run_id}/cancel",
            "/v1/conversations/{conversation_id}/history"} <= set(paths)
    events = paths["/v1/runs/{run_id}/events"]["get"]["responses"]
    assert {"200", "204", "401", "404"} <= set(events) and "text/event-stream" in events["200"]["content"]

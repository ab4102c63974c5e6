"""D8 through the HTTP app in process (httpx ASGITransport, a SQLite view store): an id
beyond a finished run's end gets ``reset`` and then what a new client gets, valid ids as
D1; the AI SDK stream tells a reset with a transient part and replays the same message.
The pure rule: tests/unit/delivery/test_delivery_reset_unit.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from imprint.delivery.summary import validate_stream
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.app import create_app
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.support.delivery_builders import closed, published, running, settled
from tests.support.sse import SSE, parse_sse

RUN = "run-reset"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(state_dir=tmp_path / "state", database_url=None, stream_open_wait_seconds=0.3)


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
async def client(settings: Settings, store: ViewStore) -> AsyncIterator[httpx.AsyncClient]:
    async def publish(message: Any) -> None:
        pass

    app = create_app(settings, store, publish, notifier=Notifier())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://delivery") as c:
        c.app = app  # type: ignore[attr-defined]
        yield c


def bearer(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(settings, 'acct-1')}"}


def sse(text: str) -> list[SSE]:
    frames: list[SSE] = []
    parse_sse(iter(text.split("\n")), lambda f: frames.append(f) or False)
    return frames


def held(frames: list[SSE]) -> list[tuple[int, str, Any]]:
    return [(f.id, f.event, f.data if f.event == "done" else f.json) for f in frames]  # type: ignore[misc]


@pytest.mark.rule("D8")
@pytest.mark.rule("D1")
async def test_an_id_beyond_a_finished_runs_end_gets_reset_then_the_view_a_new_client_gets(
    client: httpx.AsyncClient, store: ViewStore, settings: Settings,
) -> None:
    store.feed(running(RUN), published(RUN, "b1", 1, "one"), published(RUN, "b1", 2, "one, revised"),  # type: ignore[attr-defined]
               settled(RUN), closed(RUN, "closed"))
    fresh = sse((await client.get(f"/v1/runs/{RUN}/events", headers=bearer(settings))).text)
    last = fresh[-1].id
    assert last is not None and fresh[-1].event == "done"

    response = await client.get(f"/v1/runs/{RUN}/events", headers={**bearer(settings), "Last-Event-ID": str(last + 3)})
    assert response.status_code == 200, "never 204 for an id the run does not have"
    frames = sse(response.text)
    assert (frames[0].id, frames[0].event, frames[0].json) == (
        0, "reset", {"reason": "beyond_last_frame", "last_event_id": last + 3, "last_id": last})
    assert frames[1:] == fresh, "then exactly what a new client gets: from id 1, superseded frames as skeletons"
    assert validate_stream(held(fresh[:2]) + held(frames)).ok, "the client's D3 check holds across the reset"
    # the same by the query string, which the browser's first EventSource request carries
    by_query = sse((await client.get(f"/v1/runs/{RUN}/events?last_event_id={last + 3}", headers=bearer(settings))).text)
    assert by_query == frames
    # valid ids as before: the end is 204, one short streams done
    at_end = await client.get(f"/v1/runs/{RUN}/events", headers={**bearer(settings), "Last-Event-ID": str(last)})
    assert at_end.status_code == 204
    short = sse((await client.get(f"/v1/runs/{RUN}/events", headers={**bearer(settings),
                                                                      "Last-Event-ID": str(last - 1)})).text)
    assert [f.event for f in short] == ["done"]
    metrics = (await client.get("/metrics")).text
    assert 'imprint_delivery_stream_resets_total{stream="sse"} 2.0' in metrics


@pytest.mark.rule("D8")
async def test_the_ui_message_stream_tells_a_reset_and_replays_the_same_message(
    client: httpx.AsyncClient, store: ViewStore, settings: Settings,
) -> None:
    store.feed(running(RUN), published(RUN, "b1", 1, "one"), settled(RUN), closed(RUN, "closed"))  # type: ignore[attr-defined]
    url = f"/v1/ai-sdk/runs/{RUN}/stream"

    def parts(text: str) -> list[Any]:
        events = [e[len("data: "):] for e in text.split("\n\n") if e.strip()]
        return [json.loads(e) if e != "[DONE]" else e for e in events]

    plain = parts((await client.get(url, headers=bearer(settings))).text)
    last = store.run(RUN).last_frame_id  # type: ignore[union-attr]
    for valid in ("0", str(last), "x"):  # a valid id, or none at all, changes nothing (as before)
        assert parts((await client.get(url, headers={**bearer(settings), "Last-Event-ID": valid})).text) == plain
    told = parts((await client.get(url, headers={**bearer(settings), "Last-Event-ID": str(last + 1)})).text)
    assert told[0] == plain[0] and told[0]["type"] == "start"
    assert told[1] == {"type": "data-reset", "transient": True,
                       "data": {"reason": "beyond_last_frame", "last_event_id": last + 1, "last_id": last}}
    assert told[2:] == plain[1:], "then the same message a reader builds from start"

"""D8: a Last-Event-ID the stream cannot continue from gets ``reset`` and the whole view;
valid ids behave as D1. The pure rule, the client's D3 check across a reset, the AI SDK
mapping, and the routes in-process (httpx ASGITransport)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from imprint.delivery.frames import reset_frame
from imprint.delivery.reset import BEYOND_LAST_FRAME, Continue, NothingMore, Reset, resume, since_reset
from imprint.delivery.summary import validate_stream
from imprint.delivery.ui_message_stream import UIMessageStream
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.app import create_app
from services.delivery.auth import mint_token
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from tests.support.sse import SSE, parse_sse
from tests.unit.delivery.delivery_builders import closed, published, running, settled

RUN = "run-reset"


@pytest.mark.rule("D8")
@pytest.mark.rule("D1")
@pytest.mark.parametrize(("last_event_id", "last_frame_id", "terminal", "expected"), [
    (0, 0, False, Continue(0)),          # a new client of a run with no frame yet
    (0, 7, False, Continue(0)),          # a new client
    (3, 7, False, Continue(3)),          # a resume
    (7, 7, False, Continue(7)),          # caught up with a live run: follow it
    (6, 7, True, Continue(6)),           # one short of a finished run's end
    (7, 7, True, NothingMore()),         # a finished run read to its end: 204
    (8, 7, False, Reset(8, 7)),          # beyond a live run's last frame
    (9, 7, True, Reset(9, 7)),           # beyond a finished run's last frame
    (1, 0, False, Reset(1, 0)),          # any position in a run that has no frame
    (10**30, 7, True, Reset(10**30, 7)),  # however far beyond
])
def test_resume_continues_every_frame_id_of_the_run_and_resets_any_other(
    last_event_id: int, last_frame_id: int, terminal: bool, expected: object,
) -> None:
    decision = resume(last_event_id, last_frame_id=last_frame_id, terminal=terminal)
    assert decision == expected
    if isinstance(decision, Reset):
        assert decision.after == 0, "a reset starts the view over, from frame 1"
        assert decision.payload() == {"reason": BEYOND_LAST_FRAME, "last_event_id": last_event_id,
                                      "last_id": last_frame_id}


@pytest.mark.rule("D8")
def test_the_reset_frame_has_id_0_and_no_body_hash() -> None:
    frame = reset_frame(RUN, Reset(last_event_id=12, last_frame_id=5))
    assert frame.sse() == (b'id: 0\nevent: reset\n'
                           b'data: {"reason":"beyond_last_frame","last_event_id":12,"last_id":5}\n\n')


def _frames(n: int, *, done: bool) -> list[tuple[int, str, Any]]:
    """A run's frames 1..n as a client holds them (``done`` adds the terminal pair)."""
    from imprint.delivery.summary import summarize

    semantic = [(i, f"sha-{i}") for i in range(1, n + 1)]
    frames: list[tuple[int, str, Any]] = [(i, "progress", {"body_sha256": sha}) for i, sha in semantic]
    if done:
        frames += [(n + 1, "stream-summary", summarize(semantic)), (n + 2, "done", "[DONE]")]
    return frames


@pytest.mark.rule("D8")
@pytest.mark.rule("D3")
def test_a_reset_means_forget_what_you_held_and_the_summary_checks_against_what_followed() -> None:
    held_before = _frames(9, done=False)  # another run's frames, or a store since restored
    reset = (0, "reset", {"reason": BEYOND_LAST_FRAME, "last_event_id": 9, "last_id": 4})
    after = _frames(4, done=True)
    assert validate_stream([*held_before, reset, *after]).ok
    assert since_reset([*held_before, reset, *after]) == after
    # without the reset the same frames are a broken stream: that is what it prevents
    assert set(validate_stream([*held_before, *after]).problems) >= {"duplicate_id"}
    # a reset does not excuse what comes after it: a gap there is still a gap
    assert "id_gap" in validate_stream([*held_before, reset, *after[1:]]).problems
    # two resets on the way (a reconnect right after the first): only the last counts
    assert validate_stream([*held_before, reset, *after[:2], reset, *after]).ok


@pytest.mark.rule("D8")
def test_the_ui_message_stream_maps_a_reset_to_a_transient_part_and_forgets_its_reader_state() -> None:
    mapping = UIMessageStream(run_id=RUN, conversation_id="conv-r")
    mapping.blocks.add("b-from-before")
    mapping.text_open = True
    parts = mapping.parts(reset_frame(RUN, Reset(last_event_id=12, last_frame_id=5)))
    assert parts == [{"type": "data-reset", "data": {"reason": "beyond_last_frame", "last_event_id": 12,
                                                     "last_id": 5}, "transient": True}]
    assert not mapping.blocks and not mapping.text_open and not mapping.finished


# ---------------------------------------------------------------------- the routes, in-process


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

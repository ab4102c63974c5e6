"""D8 over real HTTP, PostgreSQL/SQLite and Kafka: a Last-Event-ID beyond the run's last
frame gets ``reset`` (id 0) and then the whole current view, for a live run and for a
finished one; the client's D3 check holds across the reset and a resume after it is an
ordinary D1 resume. A position from before a purge continues: frames are never deleted."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from imprint.delivery.summary import summarize, validate_stream
from tests.integration.delivery.support import SSE, Delivery, read_stream
from tests.support.delivery_builders import closed, deleted, published, running, settled, withdrawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def held(frames: list[SSE]) -> list[tuple[int, str, Any]]:
    return [(f.id, f.event, f.data if f.event == "done" else f.json) for f in frames]  # type: ignore[misc]


def another_runs_frames(n: int) -> list[tuple[int, str, Any]]:
    """What a client held before it came to this stream with ``Last-Event-ID: n``."""
    return [(i, "progress", {"stage": "elsewhere", "body_sha256": f"other-{i}"}) for i in range(1, n + 1)]


def later(delay: float, action: Any) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), action()), daemon=True)
    thread.start()
    return thread


def is_reset(frame: SSE, last_event_id: int, last_id: int) -> bool:
    return (frame.id, frame.event, frame.json) == (
        0, "reset", {"reason": "beyond_last_frame", "last_event_id": last_event_id, "last_id": last_id})


@pytest.mark.rule("D8")
@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
def test_a_live_run_resumed_beyond_its_last_frame_starts_over_and_a_resume_after_the_reset_is_d1(
    delivery: Delivery,
) -> None:
    run, token = "run-reset-live", delivery.token()
    delivery.feeder.send(running(run), *[published(run, f"b{i}", 1, f"Block {i}.", i) for i in range(1, 4)])
    last = delivery.store.run(run).last_frame_id  # type: ignore[union-attr]
    beyond = last + 5

    first, ended = read_stream(delivery.url, run, token, last_event_id=beyond, until=lambda fs: len(fs) >= 3)
    assert not ended and is_reset(first[0], beyond, last), "an explicit reset, never a silent skip to the id"
    assert [f.id for f in first] == [0, 1, 2], "then the view from frame 1"

    later(0.5, lambda: delivery.feeder.send(published(run, "b4", 1, "Block 4, live.", 4), settled(run),
                                            closed(run, "Four blocks.")))
    second, ended = read_stream(delivery.url, run, token, last_event_id=first[-1].id)
    assert ended and second[-1].event == "done"
    assert [f.id for f in second] == list(range(3, second[-1].id + 1)), "a resume after the reset: no gap, no reset"

    client_held = another_runs_frames(beyond) + held(first) + held(second)
    check = validate_stream(client_held)
    assert check.ok, check.problems
    fresh, _ = read_stream(delivery.url, run, token, last_event_id=0)
    # what a new client gets now (the frames superseded since are skeletons for it)
    assert [(f.id, f.event) for f in first[1:] + second] == [(f.id, f.event) for f in fresh]
    summary = next(f.json for f in second if f.event == "stream-summary")
    assert summary == summarize([(f.id, f.json["body_sha256"]) for f in fresh if f.event not in
                                 ("stream-summary", "done")])


@pytest.mark.rule("D8")
@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
def test_a_finished_run_resumed_beyond_its_end_gets_reset_and_the_whole_view_not_204(delivery: Delivery) -> None:
    run, token = "run-reset-finished", delivery.token()
    delivery.feeder.send(running(run), published(run, "b1", 1, "One.", 1), published(run, "b1", 2, "One, revised.", 1),
                         published(run, "b2", 1, "Two.", 2), settled(run), closed(run, "Closed answer."))
    fresh, ended = read_stream(delivery.url, run, token)
    assert ended and fresh[-1].event == "done"
    last = fresh[-1].id
    assert last is not None

    frames, ended = read_stream(delivery.url, run, token, last_event_id=last + 40)
    assert ended and is_reset(frames[0], last + 40, last)
    assert frames[1:] == fresh, "from id 1, the superseded revision as a skeleton, then done"
    assert validate_stream(another_runs_frames(last + 40) + held(frames)).ok
    assert validate_stream(held(fresh[:3]) + held(frames)).ok, "a client of this run that held its first frames"
    # valid ids as before (D1): at the end 204, one short of it the terminal
    at_end = httpx.get(f"{delivery.url}/v1/runs/{run}/events",
                       headers={"Authorization": f"Bearer {token}", "Last-Event-ID": str(last)})
    assert at_end.status_code == 204
    short, _ = read_stream(delivery.url, run, token, last_event_id=last - 1)
    assert [f.event for f in short] == ["done"]


@pytest.mark.rule("D8")
@pytest.mark.rule("D1")
@pytest.mark.rule("P21")
@pytest.mark.rule("X8")
def test_a_position_from_before_a_purge_continues_because_frames_are_never_deleted(delivery: Delivery) -> None:
    run, token = "run-reset-purge", delivery.token()
    delivery.feeder.send(running(run, conversation="conv-purge"), published(run, "b1", 1, "Built on a source.", 1),
                         published(run, "b2", 1, "Independent.", 2), settled(run), closed(run, "Closed."))
    first, _ = read_stream(delivery.url, run, token, until=lambda fs: any(f.event == "answer-publication" for f in fs))
    # after the end a withdrawal strips b1's frames to skeletons: ids and hashes stay
    delivery.feeder.send(withdrawn(run, "b1", 1, "source_revoked", source_id="src-gone"))
    rest, ended = read_stream(delivery.url, run, token, last_event_id=first[-1].id)
    assert ended and rest[0].id == first[-1].id + 1 and rest[0].event != "reset"
    assert validate_stream(held(first) + held(rest)).ok, "the hashes the client held still add up"
    fresh, _ = read_stream(delivery.url, run, token)
    assert fresh[1].json.get("withdrawn") is True, "a new client sees b1 withdrawn"
    # the conversation's deletion purges the run: no stream at all any more (D6: as if it never was)
    delivery.feeder.send(deleted(run, "conv-purge"))
    gone = httpx.get(f"{delivery.url}/v1/runs/{run}/events",
                     headers={"Authorization": f"Bearer {token}", "Last-Event-ID": str(first[-1].id)})
    assert gone.status_code == 404

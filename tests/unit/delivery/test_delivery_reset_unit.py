"""D8: a Last-Event-ID the stream cannot continue from gets ``reset`` and the whole view;
valid ids behave as D1. The pure rule, the client's D3 check across a reset and the AI SDK
mapping (the routes in process: tests/component/delivery/test_delivery_reset_http.py)."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.delivery.frames import reset_frame
from imprint.delivery.reset import BEYOND_LAST_FRAME, Continue, NothingMore, Reset, resume, since_reset
from imprint.delivery.summary import validate_stream
from imprint.delivery.ui_message_stream import UIMessageStream

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

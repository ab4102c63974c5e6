"""X11 — what a client is shown when a run ends ``stopped``: its committed blocks stay, and a
preview it still shows — never committed, and never to be, since Publication settles nothing
of a stopped run after its stop — is dropped as such before ``done`` (P14: never shown as
saved)."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.contracts.runs import RunTransitioned
from imprint.delivery import merge
from imprint.delivery.frames import Frame, RunProjection, terminal_drafts
from imprint.delivery.handling import named_blocks, step
from imprint.delivery.summary import validate_stream
from imprint.delivery.ui_message_stream import UIMessageStream
from tests.support.delivery_builders import closed, preview, published, running, save_unknown, settled

RUN = "run-stop"


def stopped(sequence: int = 4) -> RunTransitioned:
    return RunTransitioned(run_id=RUN, account_id="acct-1", conversation_id=f"conv-{RUN}", state="stopped",
                           previous="running", sequence=sequence, reason="stop_requested")


class Stream:
    """A run's frames as the store appends them (ids 1.., the terminal pair after a terminal step)."""

    def __init__(self) -> None:
        self.projection = RunProjection.new(RUN)
        self.frames: list[tuple[int, str, Any]] = []

    def feed(self, *messages: Any) -> list[tuple[int, str, Any]]:
        start = len(self.frames)
        for message in messages:
            result = step(self.projection, message)
            for draft in result.drafts:
                self.frames.append((len(self.frames) + 1, draft.event, draft.data))
            if result.terminal:
                semantic = [(i, d["body_sha256"]) for i, _, d in self.frames]
                for draft in terminal_drafts(semantic):
                    self.frames.append((len(self.frames) + 1, draft.event, draft.data))
        return self.frames[start:]

    def shown(self) -> dict[str, Any]:
        """What a client holding every block frame shows: ``blocks[block_id] = frame.block``."""
        blocks: dict[str, Any] = {}
        for _, event, data in self.frames:
            if event.startswith("answer-") and isinstance(data, dict) and "block" in data:
                if data["block"] is None:
                    blocks.pop(data["block_id"], None)
                else:
                    blocks[data["block_id"]] = data["block"]
        return blocks


@pytest.mark.rule("X11")
@pytest.mark.rule("P14")
@pytest.mark.rule("P20")
@pytest.mark.parametrize("closed_first", [True, False], ids=["closed-then-settled", "settled-then-closed"])
def test_a_stopped_run_keeps_its_committed_blocks_and_drops_the_previews_it_never_committed(
        closed_first: bool) -> None:
    stream = Stream()
    stream.feed(running(RUN), published(RUN, "b1", 1, "Saved before the stop.", 1),
                published(RUN, "b2", 1, "Saved, then revised.", 2),
                preview(RUN, "b2", 2, "A revision previewed, never saved.", 2),
                preview(RUN, "b3", 1, "A new block previewed, never saved.", 3))
    assert {b: e["status"] for b, e in stream.shown().items()} == {"b1": "saved", "b2": "unsaved", "b3": "unsaved"}

    ending = [stopped(), closed(RUN, None, state="stopped"), settled(RUN, "stopped")]
    added = stream.feed(*(ending if closed_first else [ending[0], ending[2], ending[1]]))

    events = [event for _, event, _ in added]
    assert events[-2:] == ["stream-summary", "done"]
    dropped = {data["block_id"]: data for _, event, data in added if event == "answer-preview"}
    assert set(dropped) == {"b2", "b3"}, "one frame per preview dropped, before the terminal"
    assert all((d["status"], d["reason"]) == ("dropped", "run_stopped") for d in dropped.values())
    assert (dropped["b2"]["revision"], dropped["b3"]["revision"]) == (2, 1)
    assert dropped["b3"]["block"] is None, "a block never committed leaves the view"
    assert (dropped["b2"]["block"]["revision"], dropped["b2"]["block"]["status"]) == (1, "saved"), \
        "a block falls back to its committed revision"

    shown = stream.shown()
    assert {b: (e["revision"], e["status"]) for b, e in shown.items()} == {"b1": (1, "saved"), "b2": (1, "saved")}
    assert merge.view(stream.projection.answer) == sorted(shown.values(), key=lambda e: e["delivery_ordinal"]), \
        "the answer view (GET …/answer) says the same"
    held = [(i, event, data) for i, event, data in stream.frames]
    assert validate_stream(held).ok, "the dropped frames are part of the verified stream (D3)"


@pytest.mark.rule("X11")
@pytest.mark.rule("P15")
def test_a_preview_whose_save_was_unconfirmed_is_dropped_too() -> None:
    stream = Stream()
    stream.feed(running(RUN), preview(RUN, "b1", 1, "Previewed.", 1, candidate="tool:c1"),
                save_unknown(RUN, "tool:c1", ["b1"]))
    assert stream.shown()["b1"]["status"] == "save_unknown"
    # Publication resolves an unknown save before it settles the run's end: a commit would
    # have been announced before answer.settled; none was, so none happened.
    stream.feed(stopped(), closed(RUN, None, state="stopped"), settled(RUN, "stopped"))
    assert stream.shown() == {}


@pytest.mark.rule("X11")
def test_a_preview_arriving_after_a_stopped_runs_end_is_never_shown() -> None:
    stream = Stream()
    stream.feed(running(RUN), published(RUN, "b1", 1, "Saved.", 1), stopped(),
                closed(RUN, None, state="stopped"), settled(RUN, "stopped"))
    before = merge.view(stream.projection.answer)
    assert stream.feed(preview(RUN, "b9", 1, "A straggler from before the stop.", 2)) == []
    assert merge.view(stream.projection.answer) == before


@pytest.mark.rule("X11")
def test_only_the_end_of_a_stopped_run_reads_every_block() -> None:
    assert named_blocks(closed(RUN, None, state="stopped")) is None
    assert named_blocks(settled(RUN, "stopped")) is None
    assert named_blocks(closed(RUN, "The answer.")) == () and named_blocks(settled(RUN)) == ()


@pytest.mark.rule("X11")
def test_the_ai_sdk_stream_says_a_dropped_preview_was_dropped() -> None:
    stream = Stream()
    stream.feed(running(RUN), preview(RUN, "b1", 1, "Never saved.", 1), stopped(),
                closed(RUN, None, state="stopped"), settled(RUN, "stopped"))
    reader = UIMessageStream(RUN)
    parts = [part for i, event, data in stream.frames for part in reader.parts(Frame(RUN, i, event, data, ""))]
    blocks = [p["data"] for p in parts if p["type"] == "data-block"]
    assert [(b["state"], b.get("cause")) for b in blocks] == [("preview", None), ("dropped", "run_stopped")]
    finish = next(p for p in parts if p["type"] == "finish")
    assert (finish["messageMetadata"]["run"]["state"], finish["messageMetadata"]["run"]["reason"]) == (
        "stopped", "stop_requested")

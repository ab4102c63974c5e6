"""docs/protocol.md's schemas describe what Delivery sends: every frame kind the pure frame
rules append (and their skeletons, a reset, a notice), and every part the AI SDK mapping makes
of them, validate against the wire models ``schemas/`` is generated from — and a frame of a
later v1, with a field the models do not name, is still read (the versioning policy)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imprint.contracts.stream import FRAMES, RUN_FRAME_KINDS, SSE_FRAME, UI_PART
from imprint.delivery.frame import FRAME_KINDS, Frame, as_json, reset_frame, skeleton
from imprint.delivery.conversation import NOTICE_EVENT, TURN_EVENT, Turn, transitioned
from imprint.delivery.notices import Notice
from imprint.delivery.reset import Reset
from imprint.delivery.ui_message_stream import UIMessageStream, conversation_event, notice_part
from tests.support.delivery_builders import (
    closed, preview, progress, published, rejected, revision_rejected, running, save_failed, save_unknown, settled,
    Run, unchanged, withdrawn,
)

RUN = "run-schema"
SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def a_run_with_every_frame_kind() -> list[Frame]:
    run = Run(RUN)
    run.feed(running(RUN), progress(RUN, "retrieval", "reading"),
             preview(RUN, "b1", 1, "First."), published(RUN, "b1", 1, "First."),
             unchanged(RUN, "cand-b1", "b1", 1),
             preview(RUN, "b2", 1, "Second.", ordinal=2), save_unknown(RUN, "cand-b2", ["b2"]),
             save_failed(RUN, "cand-b2", ["b2"]),
             published(RUN, "b3", 1, "Third.", ordinal=3), published(RUN, "b3", 1, "Third, another body.", ordinal=3),
             published(RUN, "b4", 1, "Fourth.", ordinal=4), withdrawn(RUN, "b4", 1),
             rejected(RUN, "cand-x", reason="unauthorized_source"), revision_rejected(RUN, "cand-y", "b1"),
             settled(RUN), closed(RUN, "The closed answer, long enough for three content chunks."))
    return [Frame(RUN, id, event, data, data.get("body_sha256", "") if isinstance(data, dict) else "")
            for id, event, data in run.frames]


def wire(frame: Frame) -> dict[str, object]:
    """The frame as a client parses it: ``data`` is the JSON the store holds and its SSE data line
    carries (``done``'s is text). The SSE bytes themselves are the transport's: that they carry
    this JSON is tests/component/delivery/test_delivery_sse.py."""
    data = frame.data if isinstance(frame.data, str) else as_json(frame.data)
    return {"id": frame.id, "event": frame.event, "data": data if data == "[DONE]" else json.loads(data)}


@pytest.mark.rule("D2")
def test_every_frame_kind_delivery_appends_is_valid_against_its_schema() -> None:
    frames = a_run_with_every_frame_kind()
    assert {f.event for f in frames} == set(FRAME_KINDS) == set(RUN_FRAME_KINDS)
    for frame in frames:
        SSE_FRAME.validate_python(wire(frame))
        if isinstance(frame.data, dict) and "body_sha256" in frame.data:
            SSE_FRAME.validate_python({**wire(frame), "data": skeleton(frame.event, frame.data, frame.body_sha256)})


@pytest.mark.rule("D8")
@pytest.mark.rule("D7")
def test_a_reset_and_a_notice_are_valid_and_a_malformed_frame_is_not() -> None:
    SSE_FRAME.validate_python(wire(reset_frame(RUN, Reset(last_event_id=40, last_frame_id=12))))
    notice = Notice(run_id=RUN, conversation_id="c", block_id="b1", revision=1, cause="source_revoked")
    SSE_FRAME.validate_python({"id": 1, "event": "notice", "data": notice.payload(1, "2026-01-01T00:00:00Z")})
    for bad in ({"id": 3, "event": "done", "data": "DONE"},
                {"id": 5, "event": "reset", "data": {"reason": "beyond_last_frame", "last_event_id": 9, "last_id": 4}},
                {"id": 2, "event": "content", "data": {"seq": 0, "text": "x" * 29, "body_sha256": "0" * 64}},
                {"id": 0, "event": "progress", "data": {"stage": "s", "detail": "", "body_sha256": "0" * 64}}):
        with pytest.raises(ValueError):
            SSE_FRAME.validate_python(bad)


@pytest.mark.rule("D2")
@pytest.mark.rule("P18")
def test_every_ai_sdk_part_the_mapping_makes_is_valid_against_its_schema() -> None:
    mapping = UIMessageStream(run_id=RUN, conversation_id="c")
    parts = [*mapping.start(), *mapping.parts(reset_frame(RUN, Reset(last_event_id=9, last_frame_id=3)))]
    for frame in a_run_with_every_frame_kind():
        parts += mapping.parts(frame)
    parts.append(notice_part({"notice_id": 1, "run_id": RUN, "block_id": "b1", "revision": 1, "cause": "x"}))
    kinds = {p["type"] for p in parts}
    assert kinds >= {"start", "data-block", "data-reset", "data-progress", "data-conflict", "data-rejection",
                     "text-start", "text-delta", "text-end", "message-metadata", "finish", "data-evidence"}, kinds
    for part in parts:
        UI_PART.validate_python(part)


@pytest.mark.rule("D9")
def test_a_conversation_stream_s_turns_notices_and_ai_sdk_parts_are_valid() -> None:
    queued = Turn(conversation_id="c", run_id="r2", kind="queued", message_id="m2", policy="enqueue", sequence=2,
                  running=("r1",), queued=("r2",))
    moved = transitioned(run_id="r1", conversation_id="c", state="completed", reason=None, sequence=5)
    assert moved is not None
    notice = Notice(run_id="r1", conversation_id="c", block_id="b1", revision=1, cause="source_revoked")
    frames = [Frame("c", 1, TURN_EVENT, queued.payload(1, "2026-01-01T00:00:00Z"), ""),
              Frame("c", 2, TURN_EVENT, moved.payload(2, "2026-01-01T00:00:00Z"), ""),
              Frame("c", 3, NOTICE_EVENT, {**notice.payload(1, "2026-01-01T00:00:00Z"), "entry_id": 3}, "")]
    for frame in frames:
        SSE_FRAME.validate_python({"id": frame.id, "event": frame.event, "data": frame.data})
        for line in conversation_event(frame).decode().splitlines():
            if line.startswith("data: "):
                UI_PART.validate_python(json.loads(line[len("data: "):]))
    for bad in ({"id": 1, "event": "turn", "data": {"run_id": "r", "kind": "queued", "sequence": 1, "at": "t"}},
                {"id": 1, "event": "turn", "data": {"entry_id": 0, "run_id": "r", "kind": "queued", "sequence": 1,
                                                     "at": "t"}}):
        with pytest.raises(ValueError):
            SSE_FRAME.validate_python(bad)


@pytest.mark.rule("R8")
def test_a_later_v1_frame_with_fields_this_version_does_not_know_is_still_read() -> None:
    later = {"id": 4, "event": "progress", "data": {"stage": "s", "detail": "", "body_sha256": "0" * 64,
                                                     "eta_seconds": 3}}
    assert SSE_FRAME.validate_python(later).data.model_extra == {"eta_seconds": 3}


@pytest.mark.rule("D2")
def test_the_generated_schema_names_every_event() -> None:
    schema = json.loads((SCHEMAS / "imprint.sse.v1.schema.json").read_text())
    assert set(schema["discriminator"]["mapping"]) == set(FRAMES)


@pytest.mark.rule("D2")
def test_docs_protocol_describes_every_event_and_part_the_schemas_hold() -> None:
    """docs/protocol.md cannot drift from the wire models: its frame table names every event
    kind, its mapping table every part type Delivery sends."""
    page = (SCHEMAS.parent / "docs" / "protocol.md").read_text()
    rows = {cell for cell in re.findall(r"^\| `([a-z-]+)` \|", page, re.MULTILINE)}
    assert rows >= set(FRAMES) - {"notice"}, set(FRAMES) - rows
    assert "event: notice" in page
    parts = set(re.findall(r"`((?:data|text|source|message)-[a-z-]+|start|finish)`", page))
    assert parts >= {"start", "data-block", "text-start", "text-delta", "text-end", "source-document",
                     "data-evidence", "message-metadata", "data-progress", "data-conflict", "data-rejection",
                     "finish", "data-reset", "data-turn", "data-notice"}, parts

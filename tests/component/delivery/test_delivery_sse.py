"""imprint's SSE form (D1/D2/D8) as the transport writes it (``services.delivery.sse``): a frame's
``id``, ``event`` and its data's JSON as the store holds it, in ``data:`` lines; the bytes of a
frame read back are made once, with the read."""

from __future__ import annotations

import json

import pytest

from imprint.contracts.stream import SSE_FRAME
from imprint.delivery.frame import FRAME_KINDS, Frame, as_json, reset_frame
from imprint.delivery.reset import Reset
from imprint.delivery.summary import DONE_DATA
from services.delivery.sse import frame_event, read_back
from services.delivery.stream_formats import SSEFrames
from tests.support.delivery_builders import (
    Run, closed, preview, progress, published, rejected, revision_rejected, running, save_failed, save_unknown,
    settled, unchanged, withdrawn,
)

RUN = "run-sse"


def parsed(sse: bytes) -> dict[str, object]:
    """An SSE event as a client parses it: its fields, the ``data`` lines joined by line breaks."""
    fields: dict[str, list[str]] = {}
    assert sse.endswith(b"\n\n") and b"\n\n" not in sse[:-2], "one event"
    for line in sse.decode("utf-8")[:-2].split("\n"):
        name, _, value = line.partition(": ")
        fields.setdefault(name, []).append(value)
    data = "\n".join(fields["data"])
    return {"id": int(fields["id"][0]), "event": fields["event"][0], "data": data if data == "[DONE]" else json.loads(data)}


@pytest.mark.rule("D1")
def test_sse_encoding_has_id_event_and_data() -> None:
    frame = Frame(RUN, 7, "content", {"seq": 0, "text": "a\nb", "body_sha256": "h"}, "h")
    text = frame_event(frame).decode()
    assert text.startswith("id: 7\nevent: content\ndata: ") and text.endswith("\n\n")
    assert frame_event(Frame(RUN, 9, "done", DONE_DATA, "")) == b"id: 9\nevent: done\ndata: [DONE]\n\n"


@pytest.mark.rule("D1")
def test_a_frame_read_back_is_sent_as_the_store_holds_it_in_data_lines() -> None:
    stored = '{"b":1,"a":"x\\ny"}'  # not the order a re-encoding would choose; its line break escaped
    frame = read_back(RUN, 3, "progress", stored, "h")
    assert frame.sse == b'id: 3\nevent: progress\ndata: {"b":1,"a":"x\\ny"}\n\n'
    assert frame_event(frame) is frame.sse and SSEFrames().frame(frame) is frame.sse, "made once, with the read"
    two_lines = read_back(RUN, 4, "progress", '{"a":\n1}', "h")
    assert two_lines.sse == b'id: 4\nevent: progress\ndata: {"a":\ndata: 1}\n\n', "one data line per line"
    assert parsed(two_lines.sse)["data"] == {"a": 1}


@pytest.mark.rule("D8")
def test_the_reset_frame_has_id_0_and_no_body_hash() -> None:
    frame = reset_frame(RUN, Reset(last_event_id=12, last_frame_id=5))
    assert frame_event(frame) == (b'id: 0\nevent: reset\n'
                                  b'data: {"reason":"beyond_last_frame","last_event_id":12,"last_id":5}\n\n')


@pytest.mark.rule("D2")
def test_every_frame_kind_read_back_is_valid_against_its_schema_as_its_sse_bytes() -> None:
    run = Run(RUN)
    run.feed(running(RUN), progress(RUN, "retrieval", "reading"), preview(RUN, "b1", 1, "First."),
             published(RUN, "b1", 1, "First."), unchanged(RUN, "cand-b1", "b1", 1),
             save_unknown(RUN, "cand-b2", ["b2"]), save_failed(RUN, "cand-b2", ["b2"]),
             published(RUN, "b3", 1, "Third.", ordinal=3), published(RUN, "b3", 1, "Third, another.", ordinal=3),
             withdrawn(RUN, "b1", 1), rejected(RUN, "cand-x", reason="unauthorized_source"),
             revision_rejected(RUN, "cand-y", "b3"), settled(RUN), closed(RUN, "A closed answer in chunks."))
    assert {event for _, event, _ in run.frames} == set(FRAME_KINDS)
    for frame_id, event, data in run.frames:
        sent = read_back(RUN, frame_id, event, as_json(data), "")
        wire = parsed(sent.sse)
        assert wire == {"id": frame_id, "event": event, "data": data}
        SSE_FRAME.validate_python(wire)

"""imprint's own SSE form (D1/D2): a frame as the bytes a stream writes — ``id``, ``event``,
one ``data`` line per line of its data's JSON, a blank line. Transport, so made here, in one
place, for every stream that writes it: a run's frames (the terminal pair among them), a
conversation's notices (D7) and its stream (D9), a ``reset`` opening (D8).

A frame read from the store (:func:`read_back`) gets its bytes once, with the read: every
client of the run is handed the same object and writes them as they are, and the data line
is the JSON the store holds, never encoded again. A frame made in code (a ``reset``) is
encoded when it is written."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic_core import from_json

from imprint.delivery.frame import Frame, as_json


def event(frame_id: int, name: str, data: str) -> bytes:
    """One SSE event: ``data`` is the frame's JSON text, or its data itself where that is text
    (``done``'s ``[DONE]``), split into ``data:`` lines where it holds a line break."""
    lines = [f"id: {frame_id}", f"event: {name}"]
    lines += [f"data: {line}" for line in data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode("utf-8")


@dataclass(frozen=True)
class StoredFrame(Frame):
    """A frame as a store's read hands it to every stream: its data parsed, its stored JSON
    kept, and its SSE event made with the value (:func:`read_back`)."""

    sse: bytes = field(default=b"", compare=False, repr=False)


def read_back(run_id: str, frame_id: int, name: str, text: str, body_sha256: str,
              trace: str | None = None) -> StoredFrame:
    """A frame as the store holds it (its data's JSON ``text``), with its SSE event."""
    data = from_json(text)
    return StoredFrame(run_id, frame_id, name, data, body_sha256, text, trace,
                       event(frame_id, name, data if isinstance(data, str) else text))


def frame_event(frame: Frame) -> bytes:
    """A frame's SSE event: a stored frame's, as it was made with its read; any other's,
    from its data's JSON (as the store would hold it)."""
    if isinstance(frame, StoredFrame):
        return frame.sse
    if isinstance(frame.data, str):
        text = frame.data
    else:
        text = frame.text if frame.text is not None else as_json(frame.data)
    return event(frame.id, frame.event, text)

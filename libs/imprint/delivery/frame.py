"""One frame of a run's stream, as a value: its kinds, its draft (before the store gives
it its per-run id), its stored form, and the pieces every message's frames are built from
(a body hash fixed at drafting, the skeleton a superseded frame keeps, content chunks, the
terminal pair). The bytes a stream writes of a frame are the transport's
(``services.delivery.sse``). Which frames each inbound message appends, and what each kind
carries, is :mod:`imprint.delivery.frames`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

from imprint.delivery.reset import RESET_EVENT, RESET_ID, Reset
from imprint.delivery.summary import DONE_DATA, DONE_EVENT, SUMMARY_EVENT, payload_sha256, summarize

CONTENT_CHUNK = 28

PROGRESS = "progress"
PREVIEW = "answer-preview"
PUBLICATION = "answer-publication"
WITHDRAWN = "answer-withdrawn"
REJECTED = "answer-rejected"
RUN_STATUS = "run-status"
CONTENT = "content"
EVIDENCE = "evidence-summary"
ERROR = "error"
SUMMARY = SUMMARY_EVENT
DONE = DONE_EVENT
FRAME_KINDS = (PROGRESS, PREVIEW, PUBLICATION, WITHDRAWN, REJECTED, RUN_STATUS, CONTENT, EVIDENCE, ERROR,
               SUMMARY, DONE)
"""The kinds of a run's frames (what the store holds)."""
RESET = RESET_EVENT
"""Not a frame of the run: the opening of a stream that starts over (D8)."""


def as_json(value: Any) -> str:
    """``value`` as compact JSON text (UTF-8, nothing escaped), the way every frame and
    live-frame skeleton is stored and sent (pydantic-core's encoder)."""
    return to_json(value).decode()


@dataclass(frozen=True)
class FrameDraft:
    """A frame before the store gives it its per-run id, with its stored forms made with the
    value (like its body hash, fixed at drafting): the store writes them as they are."""

    event: str
    data: Any
    """A JSON object (``"[DONE]"`` for ``done``)."""
    body_sha256: str
    key: str | None = None
    """Supersession key: a newer frame with the same key makes this one a skeleton."""
    text: str = field(init=False, compare=False, repr=False)
    """The data's JSON as the store holds it (and a stream sends it)."""
    superseded: str | None = field(init=False, compare=False, repr=False)
    """What the stored data becomes once a newer frame of its key replaces it (its
    :func:`skeleton`'s JSON); ``None`` without a key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", as_json(self.data))
        object.__setattr__(self, "superseded", None if self.key is None else
                           as_json(skeleton(self.event, self.data, self.body_sha256)))


@dataclass(frozen=True)
class Frame:
    """A stored frame of one run."""

    run_id: str
    id: int
    event: str
    data: Any
    body_sha256: str
    text: str | None = field(default=None, compare=False, repr=False)
    """The data's JSON as the store holds it, for a frame read back: sent as it is."""
    trace: str | None = field(default=None, compare=False, repr=False)
    """The ``traceparent`` of the span that appended it, kept beside it when tracing is on
    (X9: an id, never text): its sending continues that trace."""


def reset_frame(run_id: str, reset: Reset) -> Frame:
    """The ``reset`` frame of a stream that starts over (D8): id 0, no body hash (it is
    no semantic frame of the run)."""
    return Frame(run_id, RESET_ID, RESET, reset.payload(), "")


def draft(event: str, payload: dict[str, Any], *, key: str | None = None,
          body_sha256: str | None = None) -> FrameDraft:
    """A draft whose data carries its own ``body_sha256`` (fixed now, forever)."""
    sha = body_sha256 if body_sha256 is not None else payload_sha256(payload)
    return FrameDraft(event=event, data={**payload, "body_sha256": sha}, body_sha256=sha, key=key)


def skeleton(event: str, data: Any, body_sha256: str, *, reason: str = "superseded") -> Any:
    """What remains of a frame whose body a newer frame replaced, a withdrawal hid or a
    deletion purged: its identity and hash (so the D3 digest still checks), no body."""
    if not isinstance(data, dict):
        return data
    kept = {k: data[k] for k in ("block_id", "revision", "seq") if k in data}
    return {**kept, reason: True, "body_sha256": body_sha256}


def skeleton_text(event: str, text: str, body_sha256: str, *, reason: str = "superseded") -> str:
    """The skeleton of a stored frame (its data's JSON ``text``), as the store holds it."""
    return as_json(skeleton(event, json.loads(text), body_sha256, reason=reason))


def chunk_text(text: str, size: int = CONTENT_CHUNK) -> list[str]:
    """Split into chunks of at most ``size`` characters (code points), nothing lost."""
    return [text[i:i + size] for i in range(0, len(text), size)]


def terminal_drafts(semantic: list[tuple[int, str]]) -> list[FrameDraft]:
    """``stream-summary`` over every semantic frame of the run, then ``done``."""
    return [
        FrameDraft(event=SUMMARY, data=summarize(semantic), body_sha256=""),
        FrameDraft(event=DONE, data=DONE_DATA, body_sha256=""),
    ]

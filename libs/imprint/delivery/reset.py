"""D8: reset, never a silent gap.

A client resumes a run's stream with ``Last-Event-ID`` (D1). :func:`resume` decides,
once per connection, from the id and the run's last frame id (nothing per frame):

* :class:`Continue` — the id is a frame of the run (or 0, a new client): the frames
  after it, as D1 has it;
* :class:`NothingMore` — the run ended and the id is its last frame (``done``): answered
  204, the HTML standard's way to stop an ``EventSource``;
* :class:`Reset` — the id names a frame the run does not have: beyond its last frame
  (a position held from another run, or from a store since restored from an older
  backup). Continuing after it would skip every frame up to it without a word, and a
  204 would leave the client with nothing to show. It is answered with a ``reset``
  frame, then the current merged view: the run's frames from id 1, superseded ones as
  skeletons — exactly what a new client gets.

**A frame since purged.** The view store never deletes a frame: a supersession, a
withdrawal after the end or a deletion's purge replaces a frame's body with a skeleton
and keeps its id and ``body_sha256`` (D3's digest still checks). So every id up to the
run's last frame continues without a gap, and the only position the store can tell it
cannot continue from is one beyond the run's last frame. A run deleted by its
conversation's purge (X8) is answered 404 like any run the account cannot read (D6).

**The reset frame's id is 0** (:data:`RESET_ID`): the position of a client that holds
nothing. It is not a frame of the run: not stored, not counted by ``stream-summary``,
never sent to a client whose id the stream can continue from. The frames after it
carry their own ids 1, 2, …, so ids still increase strictly along the connection, and
a client that resumes again after a reset is an ordinary D1 client: ``Last-Event-ID: 0``
(it lost the connection right after the reset; a browser's ``EventSource`` sends this
by itself) is a new client, the id of a frame it received since is a resume.

**A reset means "forget what you held"**: a client that keeps frames across
reconnects drops every frame it held before the reset (:func:`since_reset`), and
checks ``stream-summary`` against the frames since (D3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

RESET_EVENT = "reset"
RESET_ID = 0
BEYOND_LAST_FRAME = "beyond_last_frame"
"""The reason of a reset: ``Last-Event-ID`` is greater than the run's last frame id."""


@dataclass(frozen=True)
class Continue:
    after: int
    """Send the frames after this id."""


@dataclass(frozen=True)
class NothingMore:
    """The run ended and the client holds its last frame."""


@dataclass(frozen=True)
class Reset:
    last_event_id: int
    """The id the client sent."""
    last_frame_id: int
    """The run's last frame id when the stream opened."""
    reason: str = BEYOND_LAST_FRAME
    after: int = RESET_ID
    """The view starts over: the frames after 0."""

    def payload(self) -> dict[str, Any]:
        """The ``reset`` frame's data (client-safe: the client's own id and the run's length)."""
        return {"reason": self.reason, "last_event_id": self.last_event_id, "last_id": self.last_frame_id}


Resume = Continue | NothingMore | Reset


def resume(last_event_id: int, *, last_frame_id: int, terminal: bool) -> Resume:
    """How a stream opened with ``last_event_id`` (>= 0) starts, for a run whose last frame
    is ``last_frame_id`` and which has (``terminal``) or has not written ``done``."""
    if last_event_id > last_frame_id:
        return Reset(last_event_id=last_event_id, last_frame_id=last_frame_id)
    if terminal and last_event_id == last_frame_id:
        return NothingMore()
    return Continue(after=last_event_id)


T = TypeVar("T", bound=tuple[Any, ...])


def since_reset(frames: Sequence[T]) -> list[T]:
    """What a client holds once it honoured every reset: the frames it received after
    the last ``reset``, in the order received. ``frames`` are ``(id, event, …)`` tuples."""
    last = max((i for i, frame in enumerate(frames) if frame[1] == RESET_EVENT), default=-1)
    return list(frames[last + 1:])

"""D3: the stream summary and terminal validation.

Semantic frames are every frame of a run except ``stream-summary`` and ``done``
(keep-alive comments are not frames). Each semantic frame carries ``body_sha256``:
the block body hash for preview/publication frames, otherwise the hash of the
frame's payload, fixed when the frame was first written (redacting or superseding a
frame later never changes it). The digest is SHA-256 over ``"<id>:<body_sha256>\\n"``
for every semantic frame in id order — a client that holds every frame (across
reconnects) recomputes it and compares.

A completion projection holds only if the stream has ids 1..n without gap or
repeat, exactly one ``stream-summary`` that matches the frames before it, and
exactly one ``done`` whose data is exactly ``[DONE]``, as the last frame.

A ``reset`` (D8, :mod:`imprint.delivery.reset`) tells a client to forget what it held:
the check applies to the frames received after the last reset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from imprint.canonical import canonical_sha256
from imprint.delivery.reset import since_reset

DONE_EVENT = "done"
DONE_DATA = "[DONE]"
SUMMARY_EVENT = "stream-summary"
TERMINAL_EVENTS = frozenset({SUMMARY_EVENT, DONE_EVENT})


def payload_sha256(payload: Any) -> str:
    """The ``body_sha256`` of a frame that carries no block body: its payload's canonical hash."""
    return canonical_sha256(payload)


def digest(pairs: Iterable[tuple[int, str]]) -> str:
    """SHA-256 hex over ``"<id>:<body_sha256>\\n"`` of the semantic frames, in id order."""
    h = hashlib.sha256()
    for frame_id, body_sha256 in sorted(pairs):
        h.update(f"{frame_id}:{body_sha256}\n".encode())
    return h.hexdigest()


def summarize(pairs: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """The ``stream-summary`` payload for these semantic frames."""
    ordered = sorted(pairs)
    return {
        "last_id": ordered[-1][0] if ordered else 0,
        "frame_count": len(ordered),
        "digest": digest(ordered),
    }


@dataclass
class TerminalCheck:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_stream(frames: Sequence[tuple[int, str, Any]], *, complete: bool = True) -> TerminalCheck:
    """Check what a client holds: ``(id, event, data)`` for every frame it received,
    across reconnects, in the order received. ``data`` is the decoded JSON payload
    (``"[DONE]"`` for done). Frames before a ``reset`` are not held any more (D8).

    With ``complete=False`` a stream that has not ended yet is fine; anything after a
    terminal, a repeated terminal, a gap or a repeated id still breaks it."""
    check = TerminalCheck()
    frames = since_reset(frames)
    ids = [f[0] for f in frames]
    if len(set(ids)) != len(ids):
        check.problems.append("duplicate_id")
    if ids and sorted(set(ids)) != list(range(1, max(ids) + 1)):
        check.problems.append("id_gap")
    ordered = sorted(frames, key=lambda f: f[0])
    done = [i for i, f in enumerate(ordered) if f[1] == DONE_EVENT]
    summaries = [i for i, f in enumerate(ordered) if f[1] == SUMMARY_EVENT]
    if len(done) > 1:
        check.problems.append("duplicate_terminal")
    if len(summaries) > 1:
        check.problems.append("duplicate_summary")
    if not done:
        if complete:
            check.problems.append("missing_terminal")
        if summaries and summaries[0] != len(ordered) - 1:
            check.problems.append("frame_after_summary")
        return check
    last_done = done[0]
    if ordered[last_done][2] != DONE_DATA:
        check.problems.append("contradictory_terminal")
    if last_done != len(ordered) - 1:
        check.problems.append("frame_after_terminal")
    if not summaries:
        check.problems.append("missing_summary")
        return check
    position = summaries[0]
    if position != last_done - 1:
        check.problems.append("summary_not_before_terminal")
    semantic = [(f[0], _body_sha256(f[2])) for f in ordered[:position] if f[1] not in TERMINAL_EVENTS]
    summary = ordered[position][2]
    if not isinstance(summary, dict) or summarize(semantic) != {
        k: summary.get(k) for k in ("last_id", "frame_count", "digest")
    }:
        check.problems.append("summary_mismatch")
    return check


def _body_sha256(data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("body_sha256"), str):
        return data["body_sha256"]
    return ""

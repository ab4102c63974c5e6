"""D1–D3: what one poll of ``imprint.publication.v1`` and ``imprint.runs.v1`` appends to
the streams of its runs — pure, over a :class:`ViewWorkspace`.

Delivery's handler table (:mod:`imprint.delivery.handling`) folds each message of a poll
into its run's projection (P16–P18, P21) over the workspace of its unit of work (the runs'
rows, locked: :class:`ViewWorkspace`); :func:`append` then appends the frames that step asks
for, with per-run ids (D1). Rules of the stream decided here, once:

* **The terminal is written once and validates** (D2, D3): ``stream-summary`` over every
  semantic frame of the run, then ``done``. A terminal that a client would reject is
  never written.
* **A withdrawal after the terminal** strips the withdrawn block's frames to skeletons
  (no frame follows ``done``; a client replaying from the start sees it withdrawn) and
  gives the run's conversation a notice (D7, :mod:`imprint.delivery.notices`): the
  clients that already hold the run learn it there, numbered in the same transaction.
* **A question's place in its conversation** (D9, :mod:`imprint.delivery.conversation`) is
  an entry of the conversation stream, numbered in the same transaction (with a copy of
  every notice), so every tab of the conversation folds the same list.

Storage, SQL and Kafka stay in ``services/delivery``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from imprint.delivery import merge
from imprint.delivery.conversation import Turn
from imprint.delivery.frames import DONE, SUMMARY, FrameDraft, RunProjection, Step, terminal_drafts
from imprint.delivery.notices import Notice
from imprint.delivery.summary import validate_stream


class ProjectedRun(Protocol):
    """A run as the workspace holds it: its projection, changed in place."""

    projection: RunProjection


class ViewWorkspace(Protocol):
    """The runs one poll reads and changes, and the frames it appends: the rows it holds in
    memory (:class:`imprint.delivery.rows.PollRows`: ``want``, ``run``, ``append``, ``notice``,
    ``turn``), and the store's operations off the usual path (the terminal's frame hashes,
    stripping, a purge)."""

    def want(self, named: dict[str, set[str] | None]) -> None:
        """The poll will hold these runs with the blocks their messages name (``None``: every
        block of the run): the store reads them (locked, in one order) before any is handled."""

    def run(self, run_id: str, blocks: tuple[str, ...] | None = ()) -> ProjectedRun:
        """The run, its answer state holding these blocks (``None``: all of them)."""
        ...

    def append(self, run: ProjectedRun, drafts: Sequence[FrameDraft], conflicts: Sequence[merge.Conflict],
               trace: str | None = None) -> list[int]:
        """Append the frames (their ids, in order), each keeping ``trace`` (the ``traceparent`` of
        the span that appended it, X9), and record the protocol conflicts."""
        ...

    def frame_hashes(self, run: ProjectedRun) -> list[tuple[int, str, str]]:
        """(frame id, event, body hash) of every frame of the run so far, in id order."""
        ...

    def mark_terminal(self, run: ProjectedRun) -> None: ...

    def strip(self, run: ProjectedRun, key: str, reason: str) -> None:
        """Replace the bodies of every frame of ``key`` with skeletons (ids and hashes stay)."""

    def notice(self, run: ProjectedRun, notice: Notice) -> None:
        """D7: tell the run's conversation (numbered per conversation when the poll commits)."""

    def turn(self, run: ProjectedRun, turn: Turn) -> None:
        """D9: tell the run's conversation stream (numbered per conversation when the poll commits)."""

    def purge(self, conversation_id: str, account_id: str | None) -> None:
        """X8: drop every private body of the conversation's runs."""


def append(ws: ViewWorkspace, run: ProjectedRun, result: Step, trace: str | None = None) -> list[int]:
    """What one message's step asks of its run's stream: the frames it appends (their ids,
    terminal frames included, in order), a purge, frames stripped after the end, notices."""
    if result.purge_conversation is not None:
        ws.purge(result.purge_conversation, run.projection.account_id)
        return []
    appended = ws.append(run, result.drafts, result.conflicts, trace)
    if result.terminal:
        appended += terminate(ws, run, trace)
    for block_id in result.hidden_after_terminal:
        ws.strip(run, f"block:{block_id}", "withdrawn")
    for notice in result.notices:
        ws.notice(run, notice)
    for turn in result.turns:
        ws.turn(run, turn)
    return appended


def terminate(ws: ViewWorkspace, run: ProjectedRun, trace: str | None = None) -> list[int]:
    """D2/D3: ``stream-summary`` over every semantic frame of the run, then ``done`` — once
    (their frame ids)."""
    frames = ws.frame_hashes(run)
    if any(event in (SUMMARY, DONE) for _, event, _ in frames):
        raise AssertionError(f"run {run.projection.run_id} already has a terminal frame")
    semantic = [(frame_id, body_sha256) for frame_id, _, body_sha256 in frames]
    drafts = terminal_drafts(semantic)
    appended = ws.append(run, drafts, (), trace)
    held: list[tuple[int, str, Any]] = [(frame_id, "x", {"body_sha256": h}) for frame_id, h in semantic]
    held += [(frame_id, draft.event, draft.data) for frame_id, draft in zip(appended, drafts)]
    check = validate_stream(held)
    if not check.ok:  # never write a completion projection that a client would reject
        raise AssertionError(f"terminal of {run.projection.run_id} does not validate: {check.problems}")
    ws.mark_terminal(run)
    return appended

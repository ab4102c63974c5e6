"""The per-run answer view a viewer sees: P16 (merge priority), P17 (protocol
conflict), P18 (position) and P21 (withdrawal).

One :class:`BlockState` per ``block_id`` holds what Publication told Delivery about
that block: its committed revisions, the newest preview not yet settled, the first
body hash seen for every revision, and how far it is hidden. :func:`display`
computes the one entry a viewer shows for the block (or nothing):

* (P16.1) a newer valid preview beats an older committed revision — for temporary
  display only, marked ``unsaved`` (``save_unknown`` while the save is unresolved);
* (P16.2) for the same revision the committed receipt beats preview metadata (a
  late or duplicate preview never repaints a committed hint);
* (P16.3) a current source rejection or a withdrawal beats any old preview or
  receipt: every revision known when it arrived is hidden, a later receipt of such
  a revision never resurrects it; only a newer revision can show the block again;
* (P17) the same ``block_id`` + ``revision`` with another ``body_sha256`` (preview vs
  published, published vs published, preview vs pending preview) is a
  :class:`Conflict` fact. Neither body is shown for that revision — no
  last-writer-wins; an older committed revision stays visible with a conflict mark,
  otherwise a body-less placeholder holds the position;
* (P18) the ordinal comes from the block's first commit and is kept by every
  revision; a revision replaces the block in place, never adds a second one;
* a preview whose save failed is no longer shown as pending: the view falls back to
  the committed revision, or the block disappears if nothing was ever committed.
  A failed preview is never shown as saved;
* (X11) so is a preview still shown when a stopped run ends (:func:`drop_unsaved`): nothing
  of a stopped run is committed after its stop, so it never will be.

What each message class names and does is one row of :data:`HANDLERS`, at the end;
:func:`named_blocks` and :func:`apply` dispatch through it by the message's type. The
state it folds into and what a viewer sees of it are :mod:`imprint.delivery.display`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from imprint.publication.block_ids import issue_block_id
from imprint.contracts.publication import (
    AnswerPreview,
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerSaveFailed,
    AnswerSaveUnknown,
    AnswerUnchanged,
    AnswerWithdrawn,
    BlockView,
    SaveOutcome,
)
from imprint.delivery.display import (  # the view's state and display stay importable from here too
    CLIENT_SAFE_REASONS, AnswerState, BlockState, BodyKind, Conflict, DisplayStatus, Mutable, Seen, client_reason,
    display, kept, view,
)

__all__ = [
    "CLIENT_SAFE_REASONS", "AnswerState", "BlockState", "BodyKind", "Conflict", "DisplayStatus",
    "Handler", "MergeResult", "Mutable", "Rejection", "Seen", "client_reason", "display", "drop_unsaved", "fold",
    "kept", "view",
]

@dataclass
class Rejection:
    """What a client may learn about a refused block (client-safe, D6)."""

    candidate_id: str
    block_index: int
    reason: str
    kind: Literal["block", "revision"]
    block_id: str | None = None


@dataclass
class MergeResult:
    touched: list[str] = field(default_factory=list)
    """Blocks whose display may have changed (the frame layer compares before/after)."""
    conflicts: list[Conflict] = field(default_factory=list)
    rejection: Rejection | None = None


# --------------------------------------------------------------------------- merge


def fold(state: AnswerState, message: Any, merging: BlockMerge) -> MergeResult:
    """Fold one ``imprint.publication.v1`` message into ``state`` (in place) with the
    merge of its type (a row of :data:`imprint.delivery.handling.HANDLERS`)."""
    result = MergeResult()
    merging.merge(state, message, result)
    return result


def _check(state: AnswerState, block: BlockState, revision: int, sha: str, kind: BodyKind,
           candidate_id: str) -> Conflict | None:
    """Record the first body seen for (block, revision); a different one is a conflict."""
    seen = block.seen.get(revision)
    if seen is None:
        block.seen[revision] = Seen(kind=kind, sha256=sha, candidate_id=candidate_id)
        return None
    if seen.sha256 == sha:
        if kind == "published" and seen.kind == "preview":
            block.seen[revision] = Seen(kind=kind, sha256=sha, candidate_id=candidate_id)
        return None
    conflict = Conflict(
        run_id=state.run_id, block_id=block.block_id, revision=revision,
        first_kind=seen.kind, first_sha256=seen.sha256, first_candidate_id=seen.candidate_id,
        second_kind=kind, second_sha256=sha, second_candidate_id=candidate_id,
    )
    if revision not in block.conflicted:
        block.conflicted.append(revision)
    if block.preview is not None and block.preview.revision == revision:
        block.preview = None
    state.conflicts.append(conflict)
    return conflict


def _drop_preview(block: BlockState, candidate_id: str) -> bool:
    """Settle a preview that will never be committed (rejected, failed, unchanged).
    Its revision number stops counting as a body for conflict detection."""
    if block.preview is None or block.preview.candidate_id != candidate_id:
        return False
    revision = block.preview.revision
    seen = block.seen.get(revision)
    if seen is not None and seen.kind == "preview" and seen.candidate_id == candidate_id:
        del block.seen[revision]
    block.preview = None
    return True


def drop_unsaved(block: BlockState) -> BlockView | None:
    """X11: the block's preview will never be committed (its run ended stopped, and
    Publication settles nothing after a stop): drop it as such — the view falls back to the
    committed revision, or the block leaves it — and ignore a late copy of it. Returns the
    preview dropped, if there was one."""
    preview = block.preview
    if preview is None:
        return None
    _drop_preview(block, preview.candidate_id)
    block.settled_candidates.append(preview.candidate_id)
    return preview


def _hide(block: BlockState, through: int, cause: str) -> None:
    """P16.3/P21: hide every revision known now; drop their bodies from the view."""
    block.hidden_through = max(block.hidden_through, through, block.known_revisions())
    block.hidden_cause = cause
    block.committed = {r: c for r, c in block.committed.items() if r > block.hidden_through}
    block.preview = None


def _previewed_as(message: AnswerRejected) -> str:
    """The block id a preview of this (new) block carried."""
    return issue_block_id(message.run_id, message.candidate_id, message.block_index)


# --------------------------------------------------------------------------- per message class


def body_block(message: AnswerPreview | AnswerPublished) -> tuple[str, ...]:
    return (message.block.block_id,)


def named_block(message: AnswerUnchanged | AnswerWithdrawn) -> tuple[str, ...]:
    return (message.block_id,)


def rejected_block(message: AnswerRejected) -> tuple[str, ...]:
    return (message.block_id,) if message.block_id is not None else (_previewed_as(message),)


def target_block(message: AnswerRevisionRejected) -> tuple[str, ...]:
    return (message.target_block_id,)


def outcome_blocks(message: SaveOutcome) -> tuple[str, ...] | None:
    return tuple(message.block_ids) if message.block_ids else None


def on_preview(state: AnswerState, message: AnswerPreview, result: MergeResult) -> None:
    preview = message.block
    block = state.block(preview.block_id)
    if preview.candidate_id in block.settled_candidates or preview.revision <= block.hidden_through:
        return
    pending = block.preview is not None and block.preview.revision == preview.revision
    conflict = _check(state, block, preview.revision, preview.body_sha256, "preview", preview.candidate_id)
    if conflict is not None:
        result.conflicts.append(conflict)
        result.touched.append(block.block_id)
        return
    top = block.top_committed()
    if top is not None and preview.revision <= top:
        return  # P16.2: the committed receipt of that revision wins; an older preview is stale
    if preview.revision in block.conflicted:
        return
    if block.preview is not None and block.preview.revision > preview.revision:
        return
    if pending and block.preview == preview:
        return
    block.preview = preview
    block.preview_status = "unsaved"
    if not block.ordinal_fixed:
        block.ordinal = preview.delivery_ordinal
    result.touched.append(block.block_id)


def on_published(state: AnswerState, message: AnswerPublished, result: MergeResult) -> None:
    committed = message.block
    block = state.block(committed.block_id)
    conflict = _check(state, block, committed.revision, committed.body_sha256, "published",
                      committed.candidate_id)
    if conflict is not None:
        result.conflicts.append(conflict)
        result.touched.append(block.block_id)
        return
    if committed.revision <= block.hidden_through or committed.revision in block.conflicted:
        return  # a late receipt never resurrects what a withdrawal or rejection hid
    if committed.revision in block.committed:
        return
    if not block.ordinal_fixed:
        block.ordinal = committed.delivery_ordinal  # P18: fixed by the first commit
        block.ordinal_fixed = True
    block.committed[committed.revision] = committed
    if block.preview is not None and block.preview.revision <= committed.revision:
        block.preview = None
    result.touched.append(block.block_id)


def on_unchanged(state: AnswerState, message: AnswerUnchanged, result: MergeResult) -> None:
    block = state.blocks.get(message.block_id)
    if block is not None and _drop_preview(block, message.candidate_id):
        # An exact duplicate reuses the original receipt (P11): the preview settles
        # onto the committed revision, nothing new is published.
        result.touched.append(block.block_id)


def on_rejected(state: AnswerState, message: AnswerRejected, result: MergeResult) -> None:
    result.rejection = Rejection(candidate_id=message.candidate_id, block_index=message.block_index,
                                 reason=client_reason(message.reason), kind="block")
    if message.block_id is not None:
        block = state.block(message.block_id)
        result.rejection.block_id = message.block_id
        block.settled_candidates.append(message.candidate_id)
        if message.reason == "unauthorized_source":
            _hide(block, 0, "source_rejected")
        else:
            _drop_preview(block, message.candidate_id)
        result.touched.append(block.block_id)
    else:
        # A new block refused (e.g. on the retry after a failed save, once its source was
        # revoked): its preview, if one was shown, carried the id the Host issues for
        # (run, candidate, index). That preview will never be committed: drop it.
        block = state.blocks.get(_previewed_as(message))
        if block is not None and _drop_preview(block, message.candidate_id):
            block.settled_candidates.append(message.candidate_id)
            result.touched.append(block.block_id)


def on_revision_rejected(state: AnswerState, message: AnswerRevisionRejected, result: MergeResult) -> None:
    result.rejection = Rejection(candidate_id=message.candidate_id, block_index=message.block_index,
                                 reason=client_reason(message.reason), kind="revision")
    block = state.blocks.get(message.target_block_id)
    if block is not None:  # only a block of this run is named back to the client
        result.rejection.block_id = block.block_id
        block.settled_candidates.append(message.candidate_id)
        _drop_preview(block, message.candidate_id)
        result.touched.append(block.block_id)


def on_withdrawn(state: AnswerState, message: AnswerWithdrawn, result: MergeResult) -> None:
    block = state.block(message.block_id)
    _hide(block, message.revision, message.cause)
    result.touched.append(block.block_id)


def on_save_unknown(state: AnswerState, message: AnswerSaveUnknown, result: MergeResult) -> None:
    _on_save_outcome(state, message, result, failed=False)


def on_save_failed(state: AnswerState, message: AnswerSaveFailed, result: MergeResult) -> None:
    _on_save_outcome(state, message, result, failed=True)


def _on_save_outcome(state: AnswerState, message: SaveOutcome, result: MergeResult, *, failed: bool) -> None:
    """The blocks the outcome names (none named: every block of the run) that still show
    this candidate's preview: a failed save drops it, an unknown one marks it so."""
    names = message.block_ids or [b for b in state.blocks]
    for block_id in names:
        block = state.blocks.get(block_id)
        if block is None or block.preview is None or block.preview.candidate_id != message.candidate_id:
            continue
        if failed:
            _drop_preview(block, message.candidate_id)  # never shown as saved, no longer pending
            block.settled_candidates.append(message.candidate_id)
        else:
            block.preview_status = "save_unknown"
        result.touched.append(block_id)


# --------------------------------------------------------------------------- one message class's merge


@dataclass(frozen=True, slots=True)
class BlockMerge:
    """What one ``imprint.publication.v1`` message class does to a run's answer state."""

    blocks: Callable[[Any], tuple[str, ...] | None]
    """The blocks it may read or change (``None``: every block of the run): :func:`named_blocks`."""
    merge: Callable[[AnswerState, Any, MergeResult], None]
    """The fold itself, in place: :func:`apply`."""

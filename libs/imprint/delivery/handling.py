"""Delivery's one handler table: what each message of ``imprint.publication.v1`` and
``imprint.runs.v1`` does to a run's view — pure, storage-agnostic.

Each row names, for one message class, what the stream does with it
(:mod:`imprint.delivery.frames`, D2) and, for a publication message, the blocks it may
read or change and how it merges into the answer state (:mod:`imprint.delivery.merge`,
P16–P18, P21). A reader finds what happens to a message by its type here; a new message
type is one row. Every other type names no block and appends nothing.

=============================  ================================================================
``conversation.deleted``       purge the conversation's runs (X8)
``run.transitioned``           the run's status frame
``run.progress``               the progress frame
``run.closed``                 the closed execution: content, evidence summary, then the end (D2);
                               a stopped run's previews still shown are dropped first (X11)
``answer.settled``             Publication has nothing more for the run before its end
``answer.preview``             an unsaved preview of a block (P14, P16)
``answer.published``           a committed block revision (P16–P18)
``answer.unchanged``           an exact duplicate settles its preview (P11)
``answer.withdrawn``           the block leaves current display (P21)
``answer.rejected`` …          the rejection a client may see (D6)
``answer.save_unknown``/…      a preview whose save is unknown or failed (P15)
=============================  ================================================================
"""

from __future__ import annotations

from typing import Any

from imprint.contracts.publication import (
    AnswerPreview,
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerSaveFailed,
    AnswerSaveUnknown,
    AnswerSettled,
    AnswerUnchanged,
    AnswerWithdrawn,
)
from imprint.contracts.runs import ConversationDeleted, RunClosed, RunProgress, RunTransitioned
from imprint.delivery import frames, merge
from imprint.delivery.frames import PREVIEW, PUBLICATION, REJECTED, WITHDRAWN, Publication, RunProjection, Step

HANDLERS: dict[type, frames.StepHandler] = {
    ConversationDeleted: frames.deleted,
    RunTransitioned: frames.transitioned,
    RunProgress: frames.progress,
    RunClosed: frames.closed,
    AnswerSettled: frames.settled,
    AnswerPreview: Publication(PREVIEW, frames.preview_fields, merge.Handler(merge.body_block, merge.on_preview)),
    AnswerPublished: Publication(PUBLICATION, frames.published_fields,
                                 merge.Handler(merge.body_block, merge.on_published)),
    AnswerUnchanged: Publication(PUBLICATION, frames.unchanged_fields,
                                 merge.Handler(merge.named_block, merge.on_unchanged)),
    AnswerWithdrawn: Publication(WITHDRAWN, frames.withdrawn_fields,
                                 merge.Handler(merge.named_block, merge.on_withdrawn)),
    AnswerRejected: Publication(REJECTED, frames.no_fields, merge.Handler(merge.rejected_block, merge.on_rejected)),
    AnswerRevisionRejected: Publication(REJECTED, frames.no_fields,
                                        merge.Handler(merge.target_block, merge.on_revision_rejected)),
    AnswerSaveUnknown: Publication(PREVIEW, frames.save_unknown_fields,
                                   merge.Handler(merge.outcome_blocks, merge.on_save_unknown)),
    AnswerSaveFailed: Publication(PREVIEW, frames.save_failed_fields,
                                  merge.Handler(merge.outcome_blocks, merge.on_save_failed)),
}


def step(p: RunProjection, message: Any) -> Step:
    """Fold one inbound message into ``p`` (in place) and say which frames it appends."""
    out = Step()
    handler = HANDLERS.get(type(message))
    if handler is None or (p.deleted and handler is not frames.deleted):
        return out  # a deleted run's projection takes nothing but its deletion (again)
    return handler(p, message, out)


def named_blocks(message: Any) -> tuple[str, ...] | None:
    """The blocks a message may read or change: ``()`` for none, ``None`` for every block of
    the run (a save outcome naming no block, the end of a stopped run). A store needs to hold
    only these blocks of a run's answer state when it applies the message."""
    handler = HANDLERS.get(type(message))
    if isinstance(handler, Publication):
        return handler.merge.blocks(message)
    return None if frames.ends_stopped(message) else ()


def apply(state: merge.AnswerState, message: Any) -> merge.MergeResult:
    """Fold one ``imprint.publication.v1`` message into an answer state (in place), alone."""
    handler = HANDLERS.get(type(message))
    return merge.fold(state, message, handler.merge) if isinstance(handler, Publication) else merge.MergeResult()

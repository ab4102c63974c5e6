"""Delivery's one handler table: what each message of ``imprint.publication.v1`` and
``imprint.runs.v1`` does to a run's view — pure, storage-agnostic.

Each row (a :class:`Handler`) names, for one message class, what the stream does with it
(:mod:`imprint.delivery.frames`, D2), the blocks it may read or change and, for a publication
message, how it merges into the answer state (:mod:`imprint.delivery.merge`, P16–P18, P21). A
reader finds what happens to a message by its type here; a new message type is one row.
Every other type names no block and appends nothing.

The consumer's loop (``services.common.dispatch``) calls :func:`prepare` once per unit of work
(the poll's runs and blocks declared, the messages in the order they apply), has the workspace
read what was declared (``load_wanted``), then calls :func:`handle`
with each message, the poll's :class:`~imprint.delivery.projection.ViewWorkspace` and the
message's :class:`Context`; :func:`handle` returns the frames it appended (:class:`Effects`).

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
``conversation.question_*`` …  a turn of the run's conversation stream (D9): the Journal's fact
                               of its question (X12) and the queue after it; no frame of the run
=============================  ================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from imprint.contracts.conversation import CONVERSATION_FACTS
from imprint.contracts.runs import ConversationDeleted, RunClosed, RunProgress, RunTransitioned
from imprint.delivery import frames, merge, projection
from imprint.delivery.frames import PREVIEW, PUBLICATION, REJECTED, WITHDRAWN, Publication, RunProjection, Step
from imprint.delivery.projection import ViewWorkspace


@dataclass(frozen=True, slots=True)
class Effects:
    """What one message appended to its run's stream."""

    frames: tuple[int, ...] = ()
    """The ids of the frames it appended, in order (a terminal's included)."""


NOTHING = Effects()


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler knows about a message besides its body."""

    trace: str | None = None
    """The ``traceparent`` of the span the message is handled in (X9): the frames it appends
    keep it, so whichever instance sends them continues the trace. ``None``: tracing is off."""


def run_level(message: Any) -> tuple[str, ...] | None:
    """A run message names no block — but the end of a stopped run reads every block (its
    previews still shown are dropped, X11)."""
    return None if frames.ends_stopped(message) else ()


@dataclass(frozen=True, slots=True)
class Handler:
    """What one message class does to a run's view: its ``step`` folds it into the run's
    projection and says which frames it appends; ``blocks`` are the blocks it may read or
    change (``None``: every block of the run); ``merge``, a publication message's fold into the
    answer state alone."""

    step: frames.StreamStep
    blocks: Callable[[Any], tuple[str, ...] | None] = run_level
    merge: merge.BlockMerge | None = None

    def __call__(self, ws: ViewWorkspace, message: Any, context: Context) -> Effects:
        run = ws.run(message.run_id, self.blocks(message))
        return Effects(tuple(projection.append(ws, run, self.take(run.projection, message), context.trace)))

    def take(self, p: RunProjection, message: Any) -> Step:
        """Fold ``message`` into ``p`` (in place) and say which frames it appends."""
        if p.deleted and self.step is not frames.deleted:
            return Step()  # a deleted run's projection takes nothing but its deletion (again)
        return self.step(p, message, Step())


def _publication(event: str, fields: Callable[[dict[str, Any], Any, str], str | None],
                 blocks: Callable[[Any], tuple[str, ...] | None],
                 fold: Callable[[merge.AnswerState, Any, merge.MergeResult], None]) -> Handler:
    """The row of one ``imprint.publication.v1`` message class: merged, then framed."""
    merging = merge.BlockMerge(blocks, fold)
    return Handler(Publication(event, fields, merging), blocks, merging)


HANDLERS: dict[type, Handler] = {
    ConversationDeleted: Handler(frames.deleted),
    RunTransitioned: Handler(frames.transitioned),
    RunProgress: Handler(frames.progress),
    RunClosed: Handler(frames.closed),
    AnswerSettled: Handler(frames.settled),
    AnswerPreview: _publication(PREVIEW, frames.preview_fields, merge.body_block, merge.on_preview),
    AnswerPublished: _publication(PUBLICATION, frames.published_fields, merge.body_block, merge.on_published),
    AnswerUnchanged: _publication(PUBLICATION, frames.unchanged_fields, merge.named_block, merge.on_unchanged),
    AnswerWithdrawn: _publication(WITHDRAWN, frames.withdrawn_fields, merge.named_block, merge.on_withdrawn),
    AnswerRejected: _publication(REJECTED, frames.no_fields, merge.rejected_block, merge.on_rejected),
    AnswerRevisionRejected: _publication(REJECTED, frames.no_fields, merge.target_block, merge.on_revision_rejected),
    AnswerSaveUnknown: _publication(PREVIEW, frames.save_unknown_fields, merge.outcome_blocks, merge.on_save_unknown),
    AnswerSaveFailed: _publication(PREVIEW, frames.save_failed_fields, merge.outcome_blocks, merge.on_save_failed),
    **{fact: Handler(frames.told) for fact in CONVERSATION_FACTS},
}
"""One table: a reader finds what happens to a message by its type here."""


def prepare(ws: ViewWorkspace, messages: Sequence[Any]) -> list[Any]:
    """The poll's messages in the order they apply (``run.closed`` last: the two topics are not
    ordered against each other, so a run's closed record waits for the publication messages
    polled with it), with every run of the poll and the blocks its messages name declared to
    the workspace (``ws.want``): the store reads them all up front, locked in one order (no
    deadlock between instances), before the first message is handled."""
    ordered = [m for m in messages if not isinstance(m, RunClosed)]
    ordered += [m for m in messages if isinstance(m, RunClosed)]
    named: dict[str, set[str] | None] = {}
    for message in ordered:  # every message of both topics names its run
        named[message.run_id] = _union(named.get(message.run_id, set()), named_blocks(message))
    ws.want(named)
    return ordered


def handle(ws: ViewWorkspace, message: Any, context: Context = Context()) -> Effects:
    """One message of a poll :func:`prepare` ordered: its row (:data:`HANDLERS`) — its run's
    step and the frames it appends; any other type appends nothing."""
    handler = HANDLERS.get(type(message))
    return NOTHING if handler is None else handler(ws, message, context)


def step(p: RunProjection, message: Any) -> Step:
    """Fold one inbound message into ``p`` (in place) and say which frames it appends."""
    handler = HANDLERS.get(type(message))
    return Step() if handler is None else handler.take(p, message)


def named_blocks(message: Any) -> tuple[str, ...] | None:
    """The blocks a message may read or change: ``()`` for none, ``None`` for every block of
    the run (a save outcome naming no block, the end of a stopped run). A store needs to hold
    only these blocks of a run's answer state when it applies the message."""
    handler = HANDLERS.get(type(message))
    return () if handler is None else handler.blocks(message)


def apply(state: merge.AnswerState, message: Any) -> merge.MergeResult:
    """Fold one ``imprint.publication.v1`` message into an answer state (in place), alone."""
    handler = HANDLERS.get(type(message))
    if handler is None or handler.merge is None:
        return merge.MergeResult()
    return merge.fold(state, message, handler.merge)


def _union(have: set[str] | None, more: tuple[str, ...] | None) -> set[str] | None:
    if have is None or more is None:
        return None
    return have | set(more)

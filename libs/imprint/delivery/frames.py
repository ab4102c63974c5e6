"""D2: the frames a client receives, and which frames each inbound message appends.

Frame kinds: ``progress``, ``answer-preview``, ``answer-publication``,
``answer-withdrawn``, ``answer-rejected``, ``run-status``, ``content``,
``evidence-summary``, ``error`` (a protocol conflict, P17), ``stream-summary`` and
``done`` (data exactly ``[DONE]``, once, last). Besides the run's frames, a stream may
open with ``reset`` (D8, :mod:`imprint.delivery.reset`): id 0, never stored, sent only
to a client whose ``Last-Event-ID`` the run cannot continue from, before the whole view.

Block frames are *state-carrying*: their ``block`` field is the block's resulting
display entry (:func:`imprint.delivery.merge.display`) or ``null`` when the block is
no longer shown. A client sets ``blocks[block_id] = block`` and is done; so the
newest frame of a block supersedes every older one (``key = "block:<id>"``), and the
store may strip a superseded frame to a body-less skeleton without changing what a
client ends up showing. The same holds for ``run-status`` and ``progress``.

Everything a frame carries is client-safe (D6): rejection reasons come from a fixed
vocabulary, a withdrawal names its cause but never the source, no candidate detail,
no source id other than the run's own citations.

``content`` frames carry the closed answer text in chunks of at most 28 characters;
they are only produced by ``run.closed`` — the closed execution record was persisted
(X4) — followed by ``evidence-summary``, then the terminal pair.

X11: a run that ended ``stopped`` drops, right before its terminal, every preview it still
shows — one ``answer-preview`` frame per block with ``status: "dropped"`` (reason
``run_stopped``) and the block as it stands without it: its committed revision, or ``null``.
Publication settles nothing of a stopped run after its stop, and everything before it is
settled by ``answer.settled``, so such a preview was never committed and never will be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from imprint.contracts.publication import (
    AnswerPreview,
    AnswerPublished,
    AnswerSaveFailed,
    AnswerSaveUnknown,
    AnswerSettled,
    AnswerUnchanged,
    AnswerWithdrawn,
    BlockView,
)
from imprint.contracts.runs import TERMINAL_STATES, ConversationDeleted, RunClosed, RunProgress, RunTransitioned
from imprint.delivery import conversation, merge
from imprint.delivery.conversation import Turn
from imprint.delivery.notices import Notice, withdrawn_after_end
from imprint.delivery.frame import (  # a frame's kinds and values stay importable from here too
    CONTENT, CONTENT_CHUNK, DONE, ERROR, EVIDENCE, FRAME_KINDS, PREVIEW, PROGRESS, PUBLICATION, REJECTED, RESET,
    RUN_STATUS, SUMMARY, WITHDRAWN, Frame, FrameDraft, chunk_text, draft, reset_frame, skeleton, terminal_drafts,
)

class RunProjection(merge.Mutable):
    """Delivery's view of one run: identity, lifecycle, closed record, answer state."""

    run_id: str
    account_id: str | None = None
    conversation_id: str | None = None
    message_id: str | None = None
    state: str | None = None
    previous: str | None = None
    sequence: int = 0
    reason: str | None = None
    outcome: str | None = None
    closed: bool = False
    publication_settled: bool = False
    """``answer.settled`` arrived: every block committed before the run ended is in."""
    terminal: bool = False
    """``done`` was written: nothing is ever appended after it (D3)."""
    deleted: bool = False
    answer_text: str | None = None
    evidence: list[dict[str, Any]] = Field(default_factory=list)
    snapshot_id: str | None = None
    knowledge_version: str | None = None
    answer: merge.AnswerState

    @classmethod
    def new(cls, run_id: str) -> RunProjection:
        return cls(run_id=run_id, answer=merge.AnswerState(run_id=run_id))

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "previous": self.previous, "sequence": self.sequence,
                "outcome": self.outcome, "closed": self.closed, "reason": self.reason}


@dataclass
class Step:
    drafts: list[FrameDraft] = field(default_factory=list)
    conflicts: list[merge.Conflict] = field(default_factory=list)
    terminal: bool = False
    """Append ``stream-summary`` + ``done`` after ``drafts``."""
    hidden_after_terminal: list[str] = field(default_factory=list)
    """Blocks that stopped being shown after ``done``: their frames lose their bodies."""
    notices: list[Notice] = field(default_factory=list)
    """What the run's conversation is told of those blocks (D7, :mod:`imprint.delivery.notices`)."""
    turns: list[Turn] = field(default_factory=list)
    """What the run's conversation stream is told of its question (D9, :mod:`imprint.delivery.conversation`)."""
    purge_conversation: str | None = None


def _adopt_identity(p: RunProjection, account_id: str, conversation_id: str | None = None) -> bool:
    """Bind the run to its account on first sight. A message naming another account is ignored."""
    if p.account_id is None:
        p.account_id = account_id
    elif p.account_id != account_id:
        return False
    if conversation_id is not None and p.conversation_id is None:
        p.conversation_id = conversation_id
    return True


def deleted(p: RunProjection, message: ConversationDeleted, out: Step) -> Step:
    if _adopt_identity(p, message.account_id, message.conversation_id):
        out.purge_conversation = message.conversation_id
    return out


def transitioned(p: RunProjection, message: RunTransitioned, out: Step) -> Step:
    if not _adopt_identity(p, message.account_id, message.conversation_id) or message.sequence <= p.sequence:
        return out
    p.state, p.previous, p.sequence = message.state, message.previous, message.sequence
    p.reason = message.reason if message.state in TERMINAL_STATES else None
    if not p.terminal:
        out.drafts.append(draft(RUN_STATUS, p.status(), key=RUN_STATUS))
    turn = conversation.transitioned(run_id=p.run_id, conversation_id=p.conversation_id, state=message.state,
                                     reason=p.reason, sequence=message.sequence)
    if turn is not None:
        out.turns.append(turn)
    return out


def told(p: RunProjection, message: Any, out: Step) -> Step:
    """A conversation fact of the run's question (X12): a turn of its conversation stream (D9),
    no frame of the run (its lifecycle has its own)."""
    if _adopt_identity(p, message.account_id, message.conversation_id):
        out.turns.append(conversation.of_fact(message))
    return out


def progress(p: RunProjection, message: RunProgress, out: Step) -> Step:
    if _adopt_identity(p, message.account_id) and not p.terminal:
        out.drafts.append(draft(PROGRESS, {"stage": message.stage, "detail": message.detail}, key=PROGRESS))
    return out


def closed(p: RunProjection, message: RunClosed, out: Step) -> Step:
    if not _adopt_identity(p, message.account_id, message.conversation_id) or p.closed:
        return out  # one closed record, one terminal (D3)
    p.closed = True
    p.message_id = message.message_id
    if p.state != message.state:  # its transition not heard (yet): the conversation learns the end here
        turn = conversation.transitioned(run_id=p.run_id, conversation_id=p.conversation_id, state=message.state,
                                         reason=p.reason, sequence=p.sequence + 1)
        out.turns.extend([turn] if turn is not None else [])
    p.state, p.outcome = message.state, message.outcome
    p.answer_text = message.answer_text
    p.evidence = [i.model_dump(mode="json") for i in message.evidence]
    p.snapshot_id, p.knowledge_version = message.snapshot_id, message.knowledge_version
    out.drafts.append(draft(RUN_STATUS, p.status(), key=RUN_STATUS))
    return _finish(p, out)


def ends_stopped(message: Any) -> bool:
    """Whether ``message`` may end a stopped run's stream (:func:`closed`, :func:`settled`): its
    handler then reads every block of the run, to drop the previews still shown (X11)."""
    return isinstance(message, RunClosed | AnswerSettled) and message.state == "stopped"


def settled(p: RunProjection, message: AnswerSettled, out: Step) -> Step:
    """Publication has nothing more for this run before its end (``answer.settled``)."""
    p.publication_settled = True
    return _finish(p, out)


def _finish(p: RunProjection, out: Step) -> Step:
    """The terminal frames, once both facts are in: the journal's closed record (the
    closed execution is persisted) and Publication's settlement (no committed block of
    the run is still on its way). Either may arrive first; ``done`` never overtakes a block."""
    if p.terminal or not (p.closed and p.publication_settled):
        return out
    if p.state == "stopped":
        out.drafts.extend(_dropped_previews(p))
    if p.state == "completed" and p.answer_text:
        for seq, chunk in enumerate(chunk_text(p.answer_text)):
            out.drafts.append(draft(CONTENT, {"seq": seq, "text": chunk}))
    if p.state == "completed" and p.outcome != "generation_unavailable":  # X6
        items = [
            {"source_id": i["source_id"], "title": "" if i.get("redacted") else i.get("title", ""),
             "redacted": bool(i.get("redacted"))}
            for i in p.evidence
        ]
        out.drafts.append(draft(EVIDENCE, {"items": items, "snapshot_id": p.snapshot_id,
                                           "knowledge_version": p.knowledge_version}))
    p.terminal = True
    out.terminal = True
    return out


def _dropped_previews(p: RunProjection) -> list[FrameDraft]:
    """X11: every preview a stopped run still shows, dropped as such (see the module docstring)."""
    drafts: list[FrameDraft] = []
    blocks = sorted(p.answer.blocks.values(), key=lambda b: (b.ordinal or 0, b.block_id))
    for block in blocks:
        before = merge.display(block)
        dropped = merge.drop_unsaved(block)
        if dropped is None or before is None or before["status"] not in ("unsaved", "save_unknown"):
            continue  # nothing was shown of it as a preview
        drafts.append(draft(PREVIEW, {
            "block_id": block.block_id, "block": merge.display(block), "revision": dropped.revision,
            "status": "dropped", "reason": "run_stopped", "candidate_id": dropped.candidate_id,
        }, key=f"block:{block.block_id}"))
    return drafts


@dataclass(frozen=True, slots=True)
class Publication:
    """The stream step of one ``imprint.publication.v1`` message class: merged into the
    answer state (``merge``), then one ``event`` frame per block whose display it changed,
    with what ``fields`` adds about that block."""

    event: str
    fields: Callable[[dict[str, Any], Any, str], str | None]
    """Writes the message's own fields about ``block_id`` into a frame's payload. Returns
    the block's body hash when the message carries that body (the frame's hash is then the
    body's), else ``None`` (the frame's hash is its payload's)."""
    merge: merge.BlockMerge

    def __call__(self, p: RunProjection, message: Any, out: Step) -> Step:
        if p.terminal and p.state == "stopped" and isinstance(message, AnswerPreview):
            # X11: a preview reaching a stopped run after its end was sent before the stop (by
            # Publication itself, not its relay) and is stale or failed: its commit, or its
            # failure, came before answer.settled. Its previews were dropped; it stays dropped.
            return out
        # Only the blocks this message can touch: the cost of a message never grows with the run.
        names = self.merge.blocks(message)
        held = p.answer.blocks if names is None else {b: p.answer.blocks[b] for b in names if b in p.answer.blocks}
        before = {b: merge.display(state) for b, state in held.items()}
        result = merge.fold(p.answer, message, self.merge)
        out.conflicts.extend(result.conflicts)
        if p.terminal:
            # Nothing is appended after done (D3); a block hidden now loses its bodies.
            out.hidden_after_terminal = [
                b for b in dict.fromkeys(result.touched)
                if before.get(b) is not None and merge.display(p.answer.blocks[b]) is None
            ]
            for b in out.hidden_after_terminal:  # D7: told on the conversation's notices instead
                notice = withdrawn_after_end(run_id=p.run_id, conversation_id=p.conversation_id, block_id=b,
                                             shown=before[b], cause=p.answer.blocks[b].hidden_cause)
                if notice is not None:
                    out.notices.append(notice)
            return out

        for block_id in dict.fromkeys(result.touched):
            after = merge.display(p.answer.blocks[block_id])
            conflict = next((c for c in result.conflicts if c.block_id == block_id), None)
            rejected_here = result.rejection is not None and result.rejection.block_id == block_id
            if after == before.get(block_id) and conflict is None and not rejected_here:
                continue
            payload: dict[str, Any] = {"block_id": block_id, "block": after}
            sha = self.fields(payload, message, block_id)
            if rejected_here:
                payload.update(_rejection(result.rejection))  # type: ignore[arg-type]
            out.drafts.append(draft(self.event, payload, key=f"block:{block_id}", body_sha256=sha))
            if conflict is not None:
                out.drafts.append(draft(ERROR, {
                    "code": "protocol_conflict", "block_id": block_id, "revision": conflict.revision,
                    "first": {"kind": conflict.first_kind, "body_sha256": conflict.first_sha256},
                    "second": {"kind": conflict.second_kind, "body_sha256": conflict.second_sha256},
                }))
        if result.rejection is not None and result.rejection.block_id not in result.touched:
            out.drafts.append(draft(REJECTED, _rejection(result.rejection)))
        return out


def _body_fields(payload: dict[str, Any], body: BlockView, block_id: str, status: str) -> str | None:
    if body.block_id != block_id:
        return None
    payload["revision"] = body.revision
    payload["status"] = status
    return body.body_sha256


def preview_fields(payload: dict[str, Any], message: AnswerPreview, block_id: str) -> str | None:
    return _body_fields(payload, message.block, block_id, "unsaved")


def published_fields(payload: dict[str, Any], message: AnswerPublished, block_id: str) -> str | None:
    return _body_fields(payload, message.block, block_id, "saved")


def unchanged_fields(payload: dict[str, Any], message: AnswerUnchanged, block_id: str) -> None:
    payload["revision"] = message.revision
    payload["status"] = "unchanged"


def withdrawn_fields(payload: dict[str, Any], message: AnswerWithdrawn, block_id: str) -> None:
    payload["revision"] = message.revision
    payload["cause"] = message.cause  # never the source id (D6)


def save_unknown_fields(payload: dict[str, Any], message: AnswerSaveUnknown, block_id: str) -> None:
    payload["status"] = "save_unknown"
    payload["candidate_id"] = message.candidate_id


def save_failed_fields(payload: dict[str, Any], message: AnswerSaveFailed, block_id: str) -> None:
    payload["status"] = "save_failed"
    payload["candidate_id"] = message.candidate_id


def no_fields(payload: dict[str, Any], message: Any, block_id: str) -> None:
    """A rejection: what a client may learn of it is added from the merge's client-safe rejection."""


def _rejection(r: merge.Rejection) -> dict[str, Any]:
    return {"candidate_id": r.candidate_id, "block_index": r.block_index, "reason": r.reason,
            "rejection": r.kind, **({"block_id": r.block_id} if r.block_id else {})}


StreamStep = Callable[[RunProjection, Any, Step], Step]
"""What one message class does to a run's stream: it folds the message into the projection
and says which frames it appends (a row of :data:`imprint.delivery.handling.HANDLERS`)."""

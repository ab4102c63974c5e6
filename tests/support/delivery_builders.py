"""Message builders for the delivery tests (pure: no broker, no database)."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

from imprint.contracts import conversation as facts
from imprint.contracts import publication
from imprint.contracts.publication import BlockView, CommittedBlock, Content, Receipt
from imprint.contracts.runs import ConversationDeleted, RunClosed, RunProgress, RunTransitioned
from imprint.delivery.frames import FrameDraft, RunProjection, terminal_drafts
from imprint.delivery.handling import step

__all__ = [
    "Run", "block", "closed", "deleted", "fact", "preview", "progress", "published", "receipt", "rejected",
    "revision_rejected", "running", "save_failed", "save_unknown", "settled", "unchanged", "withdrawn",
]


def block(block_id: str, revision: int, markdown: str, ordinal: int = 1, candidate: str | None = None,
          **extra: Any) -> dict[str, Any]:
    return dict(block_id=block_id, revision=revision, delivery_ordinal=ordinal,
                candidate_id=candidate or f"tool:{block_id}-{revision}",
                content=Content(type="text", markdown=markdown),
                source_hint=extra.pop("source_hint", "sources_unverified"),
                body_sha256=extra.pop("body_sha256", hashlib.sha256(markdown.encode()).hexdigest()), **extra)


def preview(run_id: str, block_id: str, revision: int, markdown: str, ordinal: int = 1,
            **kw: Any) -> publication.AnswerPreview:
    return publication.AnswerPreview(run_id=run_id,
                                     block=BlockView(**block(block_id, revision, markdown, ordinal, **kw)))


_positions = itertools.count(1)


def receipt() -> Receipt:
    position = next(_positions)
    return Receipt(receipt_id=f"rcpt-{position}", log_position=position, committed_at=datetime.now(UTC))


def published(run_id: str, block_id: str, revision: int, markdown: str, ordinal: int = 1,
              **kw: Any) -> publication.AnswerPublished:
    return publication.AnswerPublished(run_id=run_id, block=CommittedBlock(
        **block(block_id, revision, markdown, ordinal, **kw), receipt=receipt()))


def unchanged(run_id: str, candidate: str, block_id: str, revision: int) -> publication.AnswerUnchanged:
    """An exact duplicate of a committed revision (P11), with a fresh receipt."""
    return publication.AnswerUnchanged(run_id=run_id, candidate_id=candidate, block_id=block_id, revision=revision,
                                       receipt=receipt())


def withdrawn(run_id: str, block_id: str, revision: int = 1, cause: str = "source_revoked",
              source_id: str | None = None) -> publication.AnswerWithdrawn:
    return publication.AnswerWithdrawn(run_id=run_id, block_id=block_id, revision=revision,
                                       cause=cause, source_id=source_id)  # type: ignore[arg-type]


def rejected(run_id: str, candidate: str, *, reason: str = "unauthorized_source", block_id: str | None = None,
             block_index: int = 0) -> publication.AnswerRejected:
    """A refused block: a new one (by ``block_index``) or a revision of ``block_id``."""
    return publication.AnswerRejected(run_id=run_id, candidate_id=candidate, block_index=block_index,
                                      block_id=block_id, reason=reason)  # type: ignore[arg-type]


def revision_rejected(run_id: str, candidate: str, target_block_id: str,
                      reason: str = "quota_exceeded") -> publication.AnswerRevisionRejected:
    return publication.AnswerRevisionRejected(run_id=run_id, candidate_id=candidate, target_block_id=target_block_id,
                                              reason=reason)  # type: ignore[arg-type]


def save_failed(run_id: str, candidate: str, block_ids: list[str], error: str = "x") -> publication.AnswerSaveFailed:
    """A candidate's save failed; no ``block_ids`` means every block of the run."""
    return publication.AnswerSaveFailed(run_id=run_id, candidate_id=candidate, block_ids=block_ids, error=error)


def save_unknown(run_id: str, candidate: str, block_ids: list[str]) -> publication.AnswerSaveUnknown:
    """A candidate's save could not be confirmed; no ``block_ids`` means every block of the run."""
    return publication.AnswerSaveUnknown(run_id=run_id, candidate_id=candidate, block_ids=block_ids)


def running(run_id: str, account: str = "acct-1", conversation: str | None = None, sequence: int = 3) -> RunTransitioned:
    return RunTransitioned(run_id=run_id, account_id=account, conversation_id=conversation or f"conv-{run_id}",
                           state="running", previous="queued", sequence=sequence)


def progress(run_id: str, stage: str, detail: str = "", account: str = "acct-1") -> RunProgress:
    return RunProgress(run_id=run_id, account_id=account, stage=stage, detail=detail)


def deleted(run_id: str, conversation: str, account: str = "acct-1") -> ConversationDeleted:
    """The conversation's private bodies are gone (X8)."""
    return ConversationDeleted(run_id=run_id, account_id=account, conversation_id=conversation)


def settled(run_id: str, state: str = "completed") -> publication.AnswerSettled:
    """Publication's word that everything before the run's end is committed (Delivery's ``done`` waits for it)."""
    return publication.AnswerSettled(run_id=run_id, state=state)  # type: ignore[arg-type]


def closed(run_id: str, text: str | None = "The answer.", account: str = "acct-1", conversation: str | None = None,
           outcome: str = "answered", state: str = "completed") -> RunClosed:
    return RunClosed(run_id=run_id, account_id=account, conversation_id=conversation or f"conv-{run_id}",
                     message_id=f"msg-{run_id}", state=state, outcome=outcome if state == "completed" else None,
                     answer_text=text)


class Run:
    """Folds messages like the store does: ids 1.., terminal pair appended on close."""

    def __init__(self, run_id: str = "run-f") -> None:
        self.projection = RunProjection.new(run_id)
        self.frames: list[tuple[int, str, object]] = []

    def feed(self, *messages: object) -> list[FrameDraft]:
        added: list[FrameDraft] = []
        for message in messages:
            result = step(self.projection, message)
            drafts = list(result.drafts)
            for draft in drafts:
                self.frames.append((len(self.frames) + 1, draft.event, draft.data))
            if result.terminal:
                semantic = [(i, d["body_sha256"]) for i, _, d in self.frames]  # type: ignore[index]
                for draft in terminal_drafts(semantic):
                    self.frames.append((len(self.frames) + 1, draft.event, draft.data))
                    drafts.append(draft)
            added += drafts
        return added

    def events(self) -> list[str]:
        return [e for _, e, _ in self.frames]


FACTS = {cls.model_fields["type"].default.split(".", 1)[1]: cls for cls in facts.CONVERSATION_FACTS}
"""The Journal's conversation facts (X12) by their short name: ``question_queued`` …"""


def fact(name: str, run_id: str, conversation: str, sequence: int, *, running: list[str] = (),  # type: ignore[assignment]
         queued: list[str] = (), account: str = "acct-1", **extra: Any) -> Any:  # type: ignore[assignment]
    """One conversation fact as the Journal announces it (``name``: ``question_queued``, ``run_interrupted`` …)."""
    cls = FACTS[name]
    if "policy" in cls.model_fields and "policy" not in extra:
        extra["policy"] = "enqueue"
    if "request_id" in cls.model_fields and "request_id" not in extra:
        extra["request_id"] = uuid.uuid4()
    return cls(conversation_id=conversation, account_id=account, run_id=run_id, message_id=f"msg-{run_id}",
               sequence=sequence, running=list(running), queued=list(queued), **extra)

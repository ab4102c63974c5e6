"""Message builders for the delivery tests (pure: no broker, no database)."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime
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
    BlockView,
    CommittedBlock,
    Content,
    Receipt,
)
from imprint.contracts.runs import ConversationDeleted, RunClosed, RunProgress, RunTransitioned

__all__ = [
    "AnswerRejected", "AnswerRevisionRejected", "AnswerSaveFailed", "AnswerSaveUnknown", "AnswerUnchanged",
    "AnswerWithdrawn", "ConversationDeleted", "RunProgress", "block", "closed", "preview", "published", "receipt",
    "running", "settled",
]


def block(block_id: str, revision: int, markdown: str, ordinal: int = 1, candidate: str | None = None,
          **extra: Any) -> dict[str, Any]:
    return dict(block_id=block_id, revision=revision, delivery_ordinal=ordinal,
                candidate_id=candidate or f"tool:{block_id}-{revision}",
                content=Content(type="text", markdown=markdown),
                source_hint=extra.pop("source_hint", "sources_unverified"),
                body_sha256=extra.pop("body_sha256", hashlib.sha256(markdown.encode()).hexdigest()), **extra)


def preview(run_id: str, block_id: str, revision: int, markdown: str, ordinal: int = 1, **kw: Any) -> AnswerPreview:
    return AnswerPreview(run_id=run_id, block=BlockView(**block(block_id, revision, markdown, ordinal, **kw)))


_positions = itertools.count(1)


def receipt() -> Receipt:
    position = next(_positions)
    return Receipt(receipt_id=f"rcpt-{position}", log_position=position, committed_at=datetime.now(UTC))


def published(run_id: str, block_id: str, revision: int, markdown: str, ordinal: int = 1,
              **kw: Any) -> AnswerPublished:
    return AnswerPublished(run_id=run_id, block=CommittedBlock(
        **block(block_id, revision, markdown, ordinal, **kw), receipt=receipt()))


def running(run_id: str, account: str = "acct-1", conversation: str | None = None, sequence: int = 3) -> RunTransitioned:
    return RunTransitioned(run_id=run_id, account_id=account, conversation_id=conversation or f"conv-{run_id}",
                           state="running", previous="queued", sequence=sequence)


def settled(run_id: str, state: str = "completed") -> AnswerSettled:
    """Publication's word that everything before the run's end is committed (Delivery's ``done`` waits for it)."""
    return AnswerSettled(run_id=run_id, state=state)  # type: ignore[arg-type]


def closed(run_id: str, text: str | None = "The answer.", account: str = "acct-1", conversation: str | None = None,
           outcome: str = "answered", state: str = "completed") -> RunClosed:
    return RunClosed(run_id=run_id, account_id=account, conversation_id=conversation or f"conv-{run_id}",
                     message_id=f"msg-{run_id}", state=state, outcome=outcome if state == "completed" else None,
                     answer_text=text)

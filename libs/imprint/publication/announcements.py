"""What the Publication log announces on ``imprint.publication.v1``.

Every outbound message except ``answer.preview`` and ``answer.save_unknown``
is derived from one committed event of a run's stream (P14: ``answer.published``
only from committed events, relayed from the log). The ``event_id`` is a uuid5
of the domain event's (originator_id, originator_version), so relaying the same
log position twice yields the same ``event_id`` and consumers dedupe.

Client-safe: a rejection announces its reason code only; the internal detail
(which may name a private source) stays in the log (D6)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Iterable

from imprint.contracts.publication import (
    AnswerPreview,
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerSaveFailed,
    AnswerSettled,
    AnswerSaveUnknown,
    AnswerUnchanged,
    AnswerWithdrawn,
    CommittedBlock,
    PublicationMessage,
    Receipt,
)
from imprint.publication.run import PublicationRun
from imprint.publication.settlement import Commit

ANNOUNCEMENT_NAMESPACE = uuid.UUID("3b7e9c1a-4d2f-5e6b-8a9c-0d1e2f3a4b5c")
PREVIEW_NAMESPACE = uuid.UUID("5c8f0d2b-6e3a-5f7c-9b0d-1e2f3a4b5c6d")
SAVE_UNKNOWN_NAMESPACE = uuid.UUID("7d9a1e3c-8f4b-5a8d-a1c2-2f3a4b5c6d7e")


def announcement_id(originator_id: uuid.UUID, originator_version: int) -> uuid.UUID:
    return uuid.uuid5(ANNOUNCEMENT_NAMESPACE, f"{originator_id}:{originator_version}")


def announce(event: Any) -> PublicationMessage | None:
    """The v1 message a committed run event announces, or ``None`` for events
    that announce nothing (admission, grants, numbers, refusals, quota)."""
    if not isinstance(event, PublicationRun.Event):
        return None
    common: dict[str, Any] = {
        "event_id": announcement_id(event.originator_id, event.originator_version),
        "occurred_at": event.timestamp,
    }
    if isinstance(event, PublicationRun.BlockRevisionCommitted):
        block = CommittedBlock.model_validate({**event.block, "receipt": event.receipt()})
        return AnswerPublished(run_id=event.run_id, block=block, **common)
    if isinstance(event, PublicationRun.CandidateUnchanged):
        return AnswerUnchanged(
            run_id=event.run_id, candidate_id=event.candidate_id, block_id=event.block_id,
            revision=event.revision, receipt=Receipt.model_validate(event.receipt), **common,
        )
    if isinstance(event, PublicationRun.BlockRejected):
        return AnswerRejected(
            run_id=event.run_id, candidate_id=event.candidate_id, block_index=event.block_index,
            block_id=event.block_id, reason=event.reason, **common,  # type: ignore[arg-type]
        )
    if isinstance(event, PublicationRun.RevisionRejected):
        return AnswerRevisionRejected(
            run_id=event.run_id, candidate_id=event.candidate_id, block_index=event.block_index,
            target_block_id=event.target_block_id, reason=event.reason, **common,  # type: ignore[arg-type]
        )
    if isinstance(event, PublicationRun.BlockWithdrawn):
        return AnswerWithdrawn(
            run_id=event.run_id, block_id=event.block_id, revision=event.revision,
            cause=event.cause, source_id=event.source_id, **common,  # type: ignore[arg-type]
        )
    if isinstance(event, PublicationRun.Ended):
        return AnswerSettled(run_id=event.run_id, state=event.state, **common)  # type: ignore[arg-type]
    if isinstance(event, PublicationRun.SaveFailed):
        return AnswerSaveFailed(
            run_id=event.run_id, candidate_id=event.candidate_id, block_ids=event.block_ids,
            error=event.error, **common,
        )
    return None


def announce_all(events: Iterable[Any]) -> list[PublicationMessage]:
    return [message for message in map(announce, events) if message is not None]


def preview_for(run_id: str, commit: Commit) -> AnswerPreview:
    """P14: a prepared block shown before its commit. It carries no receipt and is
    never a claim of durability. Its ``event_id`` is derived from everything it shows, so
    a re-sent preview is the same message and a different one (prepared again on fresh
    state after a lost race: another ordinal, another citation status) has another id."""
    block = commit.block
    shown = hashlib.sha256(block.model_dump_json().encode()).hexdigest()
    event_id = uuid.uuid5(PREVIEW_NAMESPACE, f"{run_id}:{block.block_id}:{block.revision}:{shown}")
    return AnswerPreview(run_id=run_id, block=block, event_id=event_id)


def save_unknown_for(run_id: str, candidate_id: str, block_ids: Iterable[str] = ()) -> AnswerSaveUnknown:
    """P15: the database could not confirm the commit. Resolved later by reading
    back :meth:`PublicationRun.settled` for ``candidate_id``, never assumed."""
    event_id = uuid.uuid5(SAVE_UNKNOWN_NAMESPACE, f"{run_id}:{candidate_id}")
    return AnswerSaveUnknown(run_id=run_id, candidate_id=candidate_id, block_ids=list(block_ids), event_id=event_id)

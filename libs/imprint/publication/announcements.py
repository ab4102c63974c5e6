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
from collections.abc import Callable, Iterable
from typing import Any

from eventsourcing.utils import get_topic

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
    make = _ANNOUNCERS.get(type(event))
    if make is None:
        return None
    return make(event, {
        "event_id": announcement_id(event.originator_id, event.originator_version),
        "occurred_at": event.timestamp,
    })


def _published(event: Any, common: dict[str, Any]) -> PublicationMessage:
    block = CommittedBlock.model_validate({**event.block, "receipt": event.receipt()})
    return AnswerPublished(run_id=event.run_id, block=block, **common)


def _unchanged(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerUnchanged(
        run_id=event.run_id, candidate_id=event.candidate_id, block_id=event.block_id,
        revision=event.revision, receipt=Receipt.model_validate(event.receipt), **common,
    )


def _rejected(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerRejected(
        run_id=event.run_id, candidate_id=event.candidate_id, block_index=event.block_index,
        block_id=event.block_id, reason=event.reason, **common,
    )


def _revision_rejected(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerRevisionRejected(
        run_id=event.run_id, candidate_id=event.candidate_id, block_index=event.block_index,
        target_block_id=event.target_block_id, reason=event.reason, **common,
    )


def _withdrawn(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerWithdrawn(
        run_id=event.run_id, block_id=event.block_id, revision=event.revision,
        cause=event.cause, source_id=event.source_id, **common,
    )


def _settled(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerSettled(run_id=event.run_id, state=event.state, **common)


def _save_failed(event: Any, common: dict[str, Any]) -> PublicationMessage:
    return AnswerSaveFailed(
        run_id=event.run_id, candidate_id=event.candidate_id, block_ids=event.block_ids,
        error=event.error, **common,
    )


_ANNOUNCERS: dict[type, Callable[[Any, dict[str, Any]], PublicationMessage]] = {
    PublicationRun.BlockRevisionCommitted: _published,
    PublicationRun.CandidateUnchanged: _unchanged,
    PublicationRun.BlockRejected: _rejected,
    PublicationRun.RevisionRejected: _revision_rejected,
    PublicationRun.BlockWithdrawn: _withdrawn,
    PublicationRun.Ended: _settled,
    PublicationRun.SaveFailed: _save_failed,
}
ANNOUNCED_TOPICS = tuple(get_topic(event_class) for event_class in _ANNOUNCERS)
"""The stored topics of the events that announce something: the relay reads only these."""


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

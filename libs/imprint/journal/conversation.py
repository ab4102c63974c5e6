"""The conversation aggregate: message bindings, ownership, the deletion tombstone and the
queue of its questions (X3, X8, X12).

Every admission appends ``ExecutionBound`` here, and deletion appends ``Deleted``.
Both write this one aggregate, so the event store's optimistic concurrency
(unique ``(originator_id, version)``) serializes an admission racing a deletion:
either the admission commits first (and the deletion sees and erases its run),
or the deletion commits first (and the retried admission is refused). Nothing
is left half-deleted. The aggregate holds identifiers only — no private text but a merged
question, sealed under the conversation key like every private field — so it survives deletion
as the non-private tombstone ``ConversationDeleted``.

X12: the queue's facts (:class:`QueueEvent`) are recorded here too, so an admission and the
end of a run that frees the turn serialize on this one aggregate: two questions can never both
take the one turn. Each fact carries the queue after it (``running``, ``queued``) and its
``sequence`` in the conversation; :mod:`imprint.journal.queue` decides, this aggregate records,
:mod:`imprint.journal.queueing` closes or stops the runs a decision names."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from eventsourcing.domain import Aggregate

from imprint.ids import FoundByKey
from imprint.journal import ids
from imprint.journal.events import MessageEvent
from imprint.journal.queue import Queue, enqueued
from imprint.journal.refusals import Refusal, RefusalCode

DeletionReason = Literal["user", "retention"]


class QueueEvent(MessageEvent):
    """X12: a fact of the conversation's queue about question ``run_id``, with the queue after
    it; announced on ``imprint.runs.v1`` (:mod:`imprint.journal.announcements`). A base,
    never stored itself."""

    conversation_id: str
    account_id: str
    run_id: str
    message_id: str
    sequence: int
    running: list[str]
    queued: list[str]

    def apply(self, c: Any) -> None:
        super().apply(c)
        c.queue = Queue(tuple(self.running), tuple(self.queued))
        c.queue_sequence = self.sequence


@dataclass(frozen=True)
class MessageBinding:
    run_id: str
    message_id: str
    qcs_id: str
    bound_at: datetime


class Conversation(FoundByKey, Aggregate, key=ids.conversation_id, by=("conversation_id",)):
    class_version = 1

    class Started(Aggregate.Created):
        class_version = 1
        conversation_id: str
        account_id: str

    class ExecutionBound(MessageEvent):
        class_version = 1
        run_id: str
        message_id: str
        qcs_id: str

        def change(self, c: Conversation) -> None:
            c.bindings.append(MessageBinding(self.run_id, self.message_id, self.qcs_id, self.timestamp))
            c.last_activity_at = self.timestamp

    class Deleted(MessageEvent):
        class_version = 1
        reason: str
        run_ids: list[str]

        def change(self, c: Conversation) -> None:
            c.deleted_at = self.timestamp
            c.deletion_reason = self.reason

    class Refused(MessageEvent):
        class_version = 1
        message_type: str
        code: str
        detail: str

        def change(self, c: Conversation) -> None:
            c.refusals.append((self.message_type, self.code))

    class QuestionQueued(QueueEvent):
        class_version = 1
        policy: str

        def change(self, c: Conversation) -> None:
            c.policies[self.run_id] = self.policy

    class QuestionStarted(QueueEvent):
        class_version = 1
        policy: str
        merged: list[str]

        def change(self, c: Conversation) -> None:
            c.policies[self.run_id] = self.policy

    class QuestionRefused(QueueEvent):
        class_version = 1
        policy: str
        reason: str
        detail: str

    class QuestionCancelled(QueueEvent):
        """The user's ``question.cancel_requested`` (its ``event_id`` is this fact's)."""
        class_version = 1

    class QuestionSentNow(QueueEvent):
        """The user's ``question.send_now_requested`` (its ``event_id`` is this fact's)."""
        class_version = 1

    class QuestionMerged(QueueEvent):
        class_version = 1
        into_run_id: str
        question: str | None
        """The merged question, sealed under the conversation key (X8) for its own run."""

        def change(self, c: Conversation) -> None:
            c.merged.setdefault(self.into_run_id, []).append(self.run_id)

    class QuestionSteered(QueueEvent):
        class_version = 1
        into_run_id: str

    class RunInterrupted(QueueEvent):
        class_version = 1
        by_run_id: str

    class QuestionEnded(QueueEvent):
        class_version = 1
        end: str
        state: str
        reason: str | None

        def change(self, c: Conversation) -> None:
            c.ended[self.run_id] = self.end

    def __init__(self, conversation_id: str, account_id: str) -> None:
        self.conversation_id = conversation_id
        self.account_id = account_id
        self.bindings: list[MessageBinding] = []
        self.processed: set[str] = set()
        self.refusals: list[tuple[str, str]] = []
        self.deleted_at: datetime | None = None
        self.deletion_reason: str | None = None
        self.last_activity_at: datetime = self.created_on
        self.queue = Queue()
        """X12: the questions that have not ended (run ids)."""
        self.queue_sequence = 0
        self.policies: dict[str, str] = {}
        self.merged: dict[str, list[str]] = {}
        """run id → the questions folded into it (X12 ``merge``)."""
        self.ended: dict[str, str] = {}
        """run id → how its question ended (X12)."""

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def run_ids(self) -> list[str]:
        return [b.run_id for b in self.bindings]

    def message_ids(self) -> list[str]:
        """The conversation's messages in admission order, each once."""
        seen: dict[str, None] = {}
        for b in self.bindings:
            seen.setdefault(b.message_id, None)
        return list(seen)

    def check_admission(self, account_id: str) -> None:
        if self.deleted:
            raise Refusal(RefusalCode.CONVERSATION_DELETED, f"conversation deleted ({self.deletion_reason})")
        if account_id != self.account_id:
            raise Refusal(RefusalCode.ACCOUNT_MISMATCH, "conversation belongs to another account")

    def bind(self, event_id: str, run_id: str, message_id: str, qcs_id: str) -> None:
        if event_id in self.processed:
            return
        self.trigger_event(self.ExecutionBound, event_id=event_id, run_id=run_id, message_id=message_id, qcs_id=qcs_id)

    def delete(self, event_id: str, reason: DeletionReason) -> None:
        """Append the tombstone once; a repeated request is a no-op."""
        if self.deleted or event_id in self.processed:
            return
        self.trigger_event(self.Deleted, event_id=event_id, reason=reason, run_ids=list(dict.fromkeys(self.run_ids)))

    def message_of(self, run_id: str) -> str:
        return next((b.message_id for b in self.bindings if b.run_id == run_id), run_id)

    # -- X12: the queue's facts (decided by imprint.journal.queue) ------------------------------

    def _record(self, event: type[QueueEvent], event_id: str, run_id: str, after: Queue, **fields: object) -> None:
        self.trigger_event(event, event_id=event_id, conversation_id=self.conversation_id,
                           account_id=self.account_id, run_id=run_id, message_id=self.message_of(run_id),
                           sequence=self.queue_sequence + 1, running=list(after.running),
                           queued=list(after.queued), **fields)

    def record_started(self, event_id: str, run_id: str, policy: str) -> None:
        self._record(self.QuestionStarted, event_id, run_id, self.queue.started(run_id), policy=policy,
                     merged=list(self.merged.get(run_id, ())))

    def record_queued(self, event_id: str, run_id: str, policy: str, front: bool = False) -> None:
        self._record(self.QuestionQueued, event_id, run_id, enqueued(self.queue, run_id, front), policy=policy)

    def record_refused(self, event_id: str, run_id: str, policy: str, reason: str, detail: str) -> None:
        self._record(self.QuestionRefused, event_id, run_id, self.queue, policy=policy, reason=reason,
                     detail=detail[:200])

    def record_cancelled(self, event_id: str, run_id: str) -> None:
        self._record(self.QuestionCancelled, event_id, run_id, self.queue.without(run_id))

    def record_sent_now(self, event_id: str, run_id: str) -> None:
        self._record(self.QuestionSentNow, event_id, run_id, enqueued(self.queue.without(run_id), run_id, True))

    def record_merged(self, event_id: str, run_id: str, into: str, question: str | None) -> None:
        self._record(self.QuestionMerged, event_id, run_id, self.queue, into_run_id=into, question=question)

    def record_steered(self, event_id: str, run_id: str, into: str) -> None:
        self._record(self.QuestionSteered, event_id, run_id, self.queue, into_run_id=into)

    def record_interrupted(self, event_id: str, run_id: str, by_run_id: str) -> None:
        self._record(self.RunInterrupted, event_id, run_id, self.queue, by_run_id=by_run_id)

    def record_ended(self, event_id: str, run_id: str, end: str, state: str, reason: str | None) -> None:
        self._record(self.QuestionEnded, event_id, run_id, self.queue.without(run_id), end=end, state=state,
                     reason=reason)

    def refuse(self, event_id: str, message_type: str, refusal: Refusal) -> None:
        if event_id in self.processed:
            return
        self.trigger_event(self.Refused, event_id=event_id, message_type=message_type, code=refusal.code.value, detail=refusal.detail)


QUEUE_FACTS: tuple[type[QueueEvent], ...] = (
    Conversation.QuestionQueued, Conversation.QuestionStarted, Conversation.QuestionRefused,
    Conversation.QuestionCancelled, Conversation.QuestionSentNow, Conversation.QuestionMerged,
    Conversation.QuestionSteered, Conversation.RunInterrupted, Conversation.QuestionEnded)
"""Every queue fact (X12) a ``Conversation`` stores: one list for the tables that read them."""

"""The conversation aggregate: message bindings, ownership and the deletion tombstone (X3, X8).

Every admission appends ``ExecutionBound`` here, and deletion appends ``Deleted``.
Both write this one aggregate, so the event store's optimistic concurrency
(unique ``(originator_id, version)``) serializes an admission racing a deletion:
either the admission commits first (and the deletion sees and erases its run),
or the deletion commits first (and the retried admission is refused). Nothing
is left half-deleted. The aggregate holds identifiers only — no private text —
so it survives deletion as the non-private tombstone ``ConversationDeleted``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

from eventsourcing.domain import Aggregate

from imprint.journal import ids
from imprint.journal.events import MessageEvent
from imprint.journal.refusals import Refusal, RefusalCode

DeletionReason = Literal["user", "retention"]


@dataclass(frozen=True)
class MessageBinding:
    run_id: str
    message_id: str
    qcs_id: str
    bound_at: datetime


class Conversation(Aggregate):
    class_version = 1

    id_for = staticmethod(ids.conversation_id)
    """The aggregate's id, derived from its natural key (:mod:`imprint.journal.ids`)."""

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

    def __init__(self, conversation_id: str, account_id: str) -> None:
        self.conversation_id = conversation_id
        self.account_id = account_id
        self.bindings: list[MessageBinding] = []
        self.processed: set[str] = set()
        self.refusals: list[tuple[str, str]] = []
        self.deleted_at: datetime | None = None
        self.deletion_reason: str | None = None
        self.last_activity_at: datetime = self.created_on

    @classmethod
    def start(cls, conversation_id: str, account_id: str) -> Conversation:
        return cls(conversation_id, account_id)

    @staticmethod
    def create_id(conversation_id: str) -> UUID:
        """The library's id of ``Conversation(conversation_id, account_id)``."""
        return ids.conversation_id(conversation_id)

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

    def refuse(self, event_id: str, message_type: str, refusal: Refusal) -> None:
        if event_id in self.processed:
            return
        self.trigger_event(self.Refused, event_id=event_id, message_type=message_type, code=refusal.code.value, detail=refusal.detail)

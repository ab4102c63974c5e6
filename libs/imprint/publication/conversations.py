"""X8 seen from Publication: which runs belong to a conversation, and whether it was deleted.

A deletion must reach every run of the conversation (their blocks are withdrawn and
their bodies' key destroyed), and a run admitted into a deleted conversation must
never get a body committed."""

from __future__ import annotations

import uuid

from eventsourcing.domain import Aggregate

from imprint.ids import FoundByKey, remembered

CONVERSATION_NAMESPACE = uuid.UUID("0b7c2f1e-8a44-5c1d-9e2a-6f3b4d5c6e7f")


@remembered
def conversation_runs_id(conversation_id: str) -> uuid.UUID:
    """``ConversationRuns`` id: uuid5 of the conversation id."""
    return uuid.uuid5(CONVERSATION_NAMESPACE, conversation_id)


class ConversationRuns(FoundByKey, Aggregate, key=conversation_runs_id, by=("conversation_id",)):
    class_version = 1

    def __init__(self, conversation_id: str, account_id: str) -> None:
        self.conversation_id = conversation_id
        self.account_id = account_id
        self.runs: list[str] = []
        self.deleted = False

    class Created(Aggregate.Created):
        class_version = 1
        conversation_id: str
        account_id: str

    class RunAdded(Aggregate.Event):
        class_version = 1
        run_id: str

        def apply(self, conversation: ConversationRuns) -> None:
            conversation.runs.append(self.run_id)

    class Deleted(Aggregate.Event):
        class_version = 1
        reason: str

        def apply(self, conversation: ConversationRuns) -> None:
            conversation.deleted = True

    def add_run(self, run_id: str) -> bool:
        """Idempotent. A deleted conversation takes no new run."""
        if self.deleted or run_id in self.runs:
            return False
        self.trigger_event(self.RunAdded, run_id=run_id)
        return True

    def delete(self, reason: str) -> bool:
        if self.deleted:
            return False
        self.trigger_event(self.Deleted, reason=reason)
        return True

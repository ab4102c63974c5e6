"""``imprint.runs.v1``: accepted run transitions and closed execution records, and the facts of each
conversation's queue (X12, :mod:`imprint.contracts.conversation`) (journal → delivery, runtime SDK)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import AccountRunMessage, ConversationRunMessage, Identifier, Model
from imprint.contracts.conversation import (
    QuestionCancelled,
    QuestionEnded,
    QuestionMerged,
    QuestionQueued,
    QuestionRefused,
    QuestionSentNow,
    QuestionStarted,
    QuestionSteered,
    RunInterrupted,
)
from imprint.contracts.runtime import Outcome

RunState = Literal["admitted", "queued", "running", "completed", "stopped", "failed", "throttled", "rejected"]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "stopped", "failed", "throttled", "rejected"})


class RunTransitioned(ConversationRunMessage):
    """The journal accepted a lifecycle transition. ``sequence`` counts accepted transitions."""

    type: Literal["run.transitioned"] = "run.transitioned"
    state: RunState
    previous: RunState | None = None
    sequence: int = Field(ge=1)
    reason: str | None = None


class RunProgress(AccountRunMessage):
    type: Literal["run.progress"] = "run.progress"
    stage: str
    detail: str = ""


class EvidenceSummaryItem(Model):
    source_id: str
    title: str = ""
    redacted: bool = False


class RunClosed(ConversationRunMessage):
    """The closed execution record was persisted (X4); only then may Delivery stream ``content``."""

    type: Literal["run.closed"] = "run.closed"
    message_id: Identifier
    state: RunState
    outcome: Outcome | None = None
    answer_text: str | None = None
    evidence: list[EvidenceSummaryItem] = []
    snapshot_id: str | None = None
    knowledge_version: str | None = None


class ConversationDeleted(ConversationRunMessage):
    """Every private body of the conversation's runs is gone; views must drop them (X8)."""

    type: Literal["conversation.deleted"] = "conversation.deleted"


RunsMessage = Annotated[
    Union[RunTransitioned, RunProgress, RunClosed, ConversationDeleted,
          # X12: the conversation's queue (keyed by conversation_id)
          QuestionQueued, QuestionStarted, QuestionRefused, QuestionCancelled, QuestionSentNow, QuestionMerged,
          QuestionSteered, RunInterrupted, QuestionEnded],
    Field(discriminator="type"),
]
runs_messages: TypeAdapter[RunsMessage] = TypeAdapter(RunsMessage)

"""``imprint.control.v1``: requests from users (delivery → runtime, journal, publication), and what
the Journal asks of a runtime (a lease lapse, an interruption, a steered question, X10/X12)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import AccountRunMessage, Identifier, Message
from imprint.contracts.conversation import (
    QuestionCancelRequested,
    QuestionSendNowRequested,
    RunEndedByPolicy,
    RunSteered,
)


class RunCancelRequested(AccountRunMessage):
    type: Literal["run.cancel_requested"] = "run.cancel_requested"
    interrupted_by: Identifier | None = None
    """X12: the newer question (its run id) whose ``interrupt`` policy (or send-now) asks this
    run to stop; put here by the Journal. None: the run's user asked (X11)."""


class RunLeaseLapsed(AccountRunMessage):
    """X10: the Journal closed the run ``failed`` because its runtime fell silent for longer
    than the run's lease (``reason``). Announced by the Journal's relay from the committed
    closing, so Publication ends the run too (``answer.settled``) and refuses whatever
    that runtime proposes later; a runtime that comes back may hear it here."""

    type: Literal["run.lease_lapsed"] = "run.lease_lapsed"
    conversation_id: Identifier
    reason: Literal["runtime_lost"] = "runtime_lost"


class ConversationDeleteRequested(Message):
    type: Literal["conversation.delete_requested"] = "conversation.delete_requested"
    conversation_id: Identifier
    account_id: Identifier
    reason: Literal["user", "retention"] = "user"
    key_field: ClassVar[str | None] = "conversation_id"


ControlMessage = Annotated[
    Union[RunCancelRequested, RunLeaseLapsed, ConversationDeleteRequested, QuestionCancelRequested,
          QuestionSendNowRequested, RunSteered, RunEndedByPolicy],
    Field(discriminator="type"),
]
control_messages: TypeAdapter[ControlMessage] = TypeAdapter(ControlMessage)

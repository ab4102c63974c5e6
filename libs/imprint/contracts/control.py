"""``imprint.control.v1``: requests from users (delivery → runtime, journal, publication)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import AccountRunMessage, Identifier, Message


class RunCancelRequested(AccountRunMessage):
    type: Literal["run.cancel_requested"] = "run.cancel_requested"


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


ControlMessage = Annotated[Union[RunCancelRequested, RunLeaseLapsed, ConversationDeleteRequested], Field(discriminator="type")]
control_messages: TypeAdapter[ControlMessage] = TypeAdapter(ControlMessage)

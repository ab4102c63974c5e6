"""``imprint.control.v1``: requests from users (delivery → runtime, journal, publication)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import AccountRunMessage, Identifier, Message


class RunCancelRequested(AccountRunMessage):
    type: Literal["run.cancel_requested"] = "run.cancel_requested"


class ConversationDeleteRequested(Message):
    type: Literal["conversation.delete_requested"] = "conversation.delete_requested"
    conversation_id: Identifier
    account_id: Identifier
    reason: Literal["user", "retention"] = "user"

    @property
    def key(self) -> str:
        return self.conversation_id


ControlMessage = Annotated[Union[RunCancelRequested, ConversationDeleteRequested], Field(discriminator="type")]
control_messages: TypeAdapter[ControlMessage] = TypeAdapter(ControlMessage)

"""Envelope fields every v1 message carries."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
"""An opaque identifier chosen by a producer: non-empty, bounded, printable."""


def new_event_id() -> uuid.UUID:
    return uuid.uuid4()


def utcnow() -> datetime:
    return datetime.now(UTC)


class Model(BaseModel):
    """A strict, immutable wire object: built with an unknown field, it refuses it (what a
    producer of this version sends is exactly what its schema says). A reader accepts one
    from a newer minor version and ignores it (R8, :func:`imprint.contracts.registry.decode`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Message(Model):
    """Fields common to every message: ``type`` (also the Kafka header), ``event_id``
    (the producer's idempotency key) and ``occurred_at`` (RFC 3339)."""

    type: str
    event_id: uuid.UUID = Field(default_factory=new_event_id)
    occurred_at: AwareDatetime = Field(default_factory=utcnow)

    key_field: ClassVar[str | None] = None
    """The field whose value is the message's Kafka key (``run_id``, ``source_id``…)."""

    @property
    def key(self) -> str:
        """The Kafka key: what orders this message with the others about the same thing."""
        if self.key_field is None:
            raise NotImplementedError(f"{type(self).__name__} names no key")
        return getattr(self, self.key_field)

    def trace_ids(self) -> dict[str, Any]:
        """The ids a span about this message carries: its type and event id, and the run,
        candidate and block it names (never a field of its body)."""
        fields = self.__dict__
        return {"message_type": self.type, "event_id": self.event_id, "run_id": fields.get("run_id"),
                "candidate_id": fields.get("candidate_id"), "block_id": fields.get("block_id")}


class RunMessage(Message):
    """A message about one run; Kafka key = ``run_id``."""

    run_id: Identifier
    key_field: ClassVar[str | None] = "run_id"


class AccountRunMessage(RunMessage):
    """A message about one run that names the account the run belongs to."""

    account_id: Identifier


class ConversationRunMessage(AccountRunMessage):
    """A message about one run of an account's conversation."""

    conversation_id: Identifier

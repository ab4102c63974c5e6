"""Which union decodes which topic: the one table adapters and schema generation read."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import TypeAdapter

from imprint.contracts.control import control_messages
from imprint.contracts.deadletter import DeadLetter
from imprint.contracts.delivery import delivery_messages
from imprint.contracts.publication import publication_messages
from imprint.contracts.runs import runs_messages
from imprint.contracts.runtime import runtime_messages
from imprint.contracts.sources import sources_messages
from imprint.contracts.topics import Topic

TOPIC_MESSAGES: dict[Topic, TypeAdapter[Any]] = {
    Topic.RUNTIME: runtime_messages,
    Topic.SOURCES: sources_messages,
    Topic.PUBLICATION: publication_messages,
    Topic.RUNS: runs_messages,
    Topic.DELIVERY: delivery_messages,
    Topic.CONTROL: control_messages,
    Topic.DEADLETTER: TypeAdapter(DeadLetter),
}



def _types_of(adapter: TypeAdapter[Any]) -> list[str]:
    """The ``type`` values a topic's union accepts (read off its member models)."""
    annotated = adapter._type  # noqa: SLF001 — the annotation the adapter was built from
    union = get_args(annotated)[0] if get_args(annotated) else annotated
    members = get_args(union) or (union,)
    return [value for member in members for value in get_args(member.model_fields["type"].annotation)]


TOPIC_OF_TYPE: dict[str, Topic] = {
    message_type: topic for topic, adapter in TOPIC_MESSAGES.items() for message_type in _types_of(adapter)
}
"""The one type → topic map: every message type of the v1 contract, on the topic whose union holds it."""


def topic_of(message: Any) -> Topic:
    """The contract topic a message is produced to."""
    return TOPIC_OF_TYPE[message.type]


TRANSPORT_CAP_BYTES = 1024 * 1024
"""P3: an envelope over 1 MiB is refused at intake."""


def decode(topic: Topic | str, raw: bytes) -> Any:
    """Validate ``raw`` against ``topic``'s union. Raises ``pydantic.ValidationError``."""
    return TOPIC_MESSAGES[Topic(topic)].validate_json(raw)


def encode(message: Any) -> bytes:
    return message.model_dump_json(exclude_none=False).encode()

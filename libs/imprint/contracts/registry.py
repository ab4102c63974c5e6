"""Which union decodes which topic: the one table adapters and schema generation read."""

from __future__ import annotations

from typing import Any

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

TRANSPORT_CAP_BYTES = 1024 * 1024
"""P3: an envelope over 1 MiB is refused at intake."""


def decode(topic: Topic | str, raw: bytes) -> Any:
    """Validate ``raw`` against ``topic``'s union. Raises ``pydantic.ValidationError``."""
    return TOPIC_MESSAGES[Topic(topic)].validate_json(raw)


def encode(message: Any) -> bytes:
    return message.model_dump_json(exclude_none=False).encode()

"""Which union decodes which topic: the one table adapters and schema generation read.

R8 on the wire: messages evolve additively within a topic's major version (``.v1``). A
reader accepts every earlier minor version (a field added since has a default) and a
message of a newer one: a field it does not know is ignored — the message is read as this
version reads it — and named (:attr:`Decoded.unknown_fields`) for the consumer to record,
never refused. The models stay strict when *built* (``extra="forbid"``): a producer of
this version cannot misspell a field, and the schema says exactly what it sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from pydantic import TypeAdapter, ValidationError

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


@dataclass(frozen=True, slots=True)
class Decoded:
    """A message as this version reads it, and the fields of it this version does not know."""

    message: Any
    unknown_fields: tuple[str, ...] = ()
    """Dotted paths of the ignored fields (``qcs.conditions.note``: list positions left
    out), each once, in the order met. Names only: a value is never kept here."""


MAX_UNKNOWN_FIELDS = 32
"""At most this many unknown fields are named for one message (each cut to 100 characters)."""


def decode_noting_unknown(topic: Topic | str, raw: bytes) -> Decoded:
    """Validate ``raw`` against ``topic``'s union; fields of a newer minor version are
    ignored and named. Raises ``pydantic.ValidationError`` for anything else.

    A message of this version is validated once, as strictly as it is built. Only one the
    strict pass refuses is read again with unknown fields ignored: if that passes, the
    unknown fields were all that was wrong with it; if not, its own errors are raised."""
    adapter = TOPIC_MESSAGES[Topic(topic)]
    try:
        return Decoded(adapter.validate_json(raw))
    except ValidationError as strict:
        unknown = [error["loc"] for error in strict.errors() if error["type"] == "extra_forbidden"]
        if not unknown:
            raise
    message = adapter.validate_json(raw, extra="ignore")
    return Decoded(message, _field_names(unknown, getattr(message, "type", None)))


def decode(topic: Topic | str, raw: bytes) -> Any:
    """The message of :func:`decode_noting_unknown`, for a reader with nothing to record."""
    return decode_noting_unknown(topic, raw).message


def _field_names(locations: list[tuple[int | str, ...]], tag: str | None) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for loc in locations:
        # A discriminated union's errors start with the member's tag (the message type).
        path = loc[1:] if loc and loc[0] == tag else loc
        names.setdefault(".".join(str(step) for step in path if isinstance(step, str))[:100], None)
    return tuple(names)[:MAX_UNKNOWN_FIELDS]


def encode(message: Any) -> bytes:
    return message.model_dump_json(exclude_none=False).encode()

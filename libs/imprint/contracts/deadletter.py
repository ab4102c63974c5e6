"""``imprint.deadletter.v1``: anything refused at intake, with the original bytes."""

from __future__ import annotations

import base64
from typing import Literal

from imprint.contracts.base import Message

DeadLetterReason = Literal[
    "unparseable", "schema_invalid", "oversized", "not_a_candidate", "unknown_type", "processing_error"
]
"""``processing_error``: the message decoded, but applying it raised a non-transient error
(a defect or an input no rule anticipated); it is set aside so the partition keeps moving."""


ORIGINAL_CAP_BYTES = 512 * 1024
"""A dead letter carries at most this much of the original value, so that it always fits a
Kafka record (base64 grows it by a third) whatever was refused."""


class DeadLetter(Message):
    type: Literal["deadletter"] = "deadletter"
    reason: DeadLetterReason
    detail: str
    consumer: str
    topic: str
    partition: int
    offset: int
    key_b64: str | None = None
    original_b64: str
    """The original value, base64; only its first ``ORIGINAL_CAP_BYTES`` when ``original_truncated``
    (the whole value stays on the source topic at topic/partition/offset)."""
    original_size: int = 0
    original_sha256: str = ""
    original_truncated: bool = False

    @property
    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.partition}"

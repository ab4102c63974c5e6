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

    @property
    def original(self) -> bytes:
        return base64.b64decode(self.original_b64)

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.partition}"

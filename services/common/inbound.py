"""What a consumer hands to a store: one decoded message and the Kafka position it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import Tracking
from opentelemetry.context import Context


@dataclass(frozen=True)
class Inbound:
    topic: str
    partition: int
    offset: int
    message: Any
    """A decoded v1 contract model."""
    size: int = 0
    """Bytes of the original envelope (P3 transport cap)."""
    raw: bytes = b""
    """The original envelope, kept for a dead letter if processing refuses the message."""
    key: bytes | None = None
    trace: Context | None = None
    """The remote parent the record's ``traceparent`` header named (``None``: it named none):
    a part's span for this message opens under it (``services.common.tracing.handling``)."""

    @property
    def tracking(self) -> Tracking:
        """The eventsourcing tracking record that commits with the events this message causes."""
        return Tracking(application_name=f"{self.topic}#{self.partition}", notification_id=self.offset)

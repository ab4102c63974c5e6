"""The event base every journal aggregate shares for what one inbound message caused."""

from __future__ import annotations

from typing import Any

from eventsourcing.domain import Aggregate


class MessageEvent(Aggregate.Event):
    """An event caused by one inbound message, named by its ``event_id``.

    Applying it first records that message as processed on the aggregate (its
    ``processed`` set), so an exact redelivery is recognised and changes nothing (X2);
    then :meth:`change` applies what the event itself says."""

    event_id: str

    def apply(self, aggregate: Any) -> None:
        aggregate.processed.add(self.event_id)
        self.change(aggregate)

    def change(self, aggregate: Any) -> None:
        """What the event changes besides ``processed``."""

"""``imprint.delivery.v1``: what Delivery observed. Each fact stands alone (D4)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import AccountRunMessage, Identifier


class DeliveryObservation(AccountRunMessage):
    connection_id: Identifier
    last_event_id: int = 0


class DeliverySent(DeliveryObservation):
    type: Literal["delivery.sent"] = "delivery.sent"
    frame_count: int = 0


class DeliveryInterrupted(DeliveryObservation):
    type: Literal["delivery.interrupted"] = "delivery.interrupted"


class DeliveryCompleted(DeliveryObservation):
    """The terminal frame was written and the response finished."""

    type: Literal["delivery.completed"] = "delivery.completed"
    frame_count: int = 0


class ClientObservation(AccountRunMessage):
    last_event_id: int = 0
    block_ids: list[str] = []
    client_id: Identifier | None = None
    """The client that reports (the reference page: one per page load), so that what it
    rendered and what it received can be told apart from another client's (D7)."""
    revisions: dict[str, int] = {}
    """block id → the revision the client shows (D7: which revision of a withdrawn block it saw)."""


class ClientReceived(ClientObservation):
    type: Literal["client.received"] = "client.received"
    notice_ids: list[int] = []
    """Notices of the run's conversation the client received (D7: a withdrawal after the end)."""


class ClientRendered(ClientObservation):
    type: Literal["client.rendered"] = "client.rendered"


class ClientConflict(ClientObservation):
    type: Literal["client.conflict"] = "client.conflict"
    detail: str = ""


DeliveryMessage = Annotated[
    Union[DeliverySent, DeliveryInterrupted, DeliveryCompleted, ClientReceived, ClientRendered, ClientConflict],
    Field(discriminator="type"),
]
delivery_messages: TypeAdapter[DeliveryMessage] = TypeAdapter(DeliveryMessage)

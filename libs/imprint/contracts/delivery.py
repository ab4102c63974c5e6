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


class ClientReceived(ClientObservation):
    type: Literal["client.received"] = "client.received"


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

"""A message that cannot be applied is set aside alone; a transient failure retries the batch."""

from __future__ import annotations

import asyncio
import base64

import pytest
import psycopg
from eventsourcing.persistence import DataError, OperationalError

from services.common.inbound import Inbound
from services.common.kafka import apply_isolating_poison


def batch(n: int) -> list[Inbound]:
    return [Inbound("imprint.runtime.v1", 0, i, message=f"m{i}", raw=f"raw-{i}".encode()) for i in range(n)]


def test_a_poison_message_is_dead_lettered_alone_and_the_rest_applied() -> None:
    applied: list[int] = []

    async def handle(items: list[Inbound]) -> None:
        if any(item.offset == 2 for item in items):
            raise ValueError("no rule anticipated this")
        applied.extend(item.offset for item in items)

    letters = asyncio.run(apply_isolating_poison(handle, batch(5), "publication"))
    assert applied == [0, 1, 3, 4]
    assert [(l.offset, l.reason) for l in letters] == [(2, "processing_error")]
    assert base64.b64decode(letters[0].original_b64) == b"raw-2"


def test_a_transient_failure_is_raised_for_a_retry_of_the_whole_batch() -> None:
    async def handle(items: list[Inbound]) -> None:
        raise OperationalError("connection lost")

    with pytest.raises(OperationalError):
        asyncio.run(apply_isolating_poison(handle, batch(3), "publication"))


@pytest.mark.parametrize("refusal", [DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
                                     psycopg.DataError("invalid byte sequence for encoding")])
def test_a_value_the_database_refuses_is_the_messages_failure_not_a_retry(refusal: Exception) -> None:
    """Found by the fuzz tier: a block id with a NUL character stalled Delivery on PostgreSQL,
    its batch retried for ever because eventsourcing's ``DataError`` is a ``PersistenceError``."""
    applied: list[int] = []

    async def handle(items: list[Inbound]) -> None:
        if any(item.offset == 1 for item in items):
            raise refusal
        applied.extend(item.offset for item in items)

    letters = asyncio.run(apply_isolating_poison(handle, batch(3), "delivery"))
    assert applied == [0, 2]
    assert [(l.offset, l.reason) for l in letters] == [(1, "processing_error")]

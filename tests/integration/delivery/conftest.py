"""Delivery over real PostgreSQL (its own schema per test), real Kafka (its own topic
prefix per test) and real HTTP (uvicorn on 127.0.0.1, a free port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, start_delivery

pytestmark = pytest.mark.integration


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    settings = isolated.model_copy(update={"sse_keepalive_seconds": 0.5, "stream_open_wait_seconds": 0.1})
    yield from start_delivery(settings)

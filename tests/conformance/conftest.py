"""The conformance tier: the kit (``imprint conformance``) against a real stack — every part as
a process on real Kafka and PostgreSQL — directly and behind a real nginx. One stack per module,
so the kit's runs share one start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.settings import Settings
from tests.conftest import own_settings
from tests.support.stack import Stack

ORIGIN = "http://front.conformance.test"
KEEPALIVE = 1.0


@pytest.fixture(scope="module")
def module_settings(kafka_bootstrap: str, store_backend: str, request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    yield from own_settings(kafka_bootstrap, store_backend, request, tmp_path_factory.mktemp("state"),
                            sse_keepalive_seconds=KEEPALIVE, stream_open_wait_seconds=1.0,
                            stream_ticket_ttl_seconds=3.0, cors_origins=(ORIGIN,))


@pytest.fixture(scope="module")
def stack(module_settings: Settings) -> Iterator[Stack]:
    with Stack(module_settings) as running:
        yield running

"""Fixtures for the Publication integration tests over real Kafka, on each store backend.

``stack``: ONE publication + relay process pair per test module and backend, on the
module's own topic prefix and stores (each test uses its own run ids and source ids,
so tests never read each other's outcomes). ``driver``: the in-process
``PublicationLog`` on the test's own ``isolated`` settings, for precise log
assertions and for faults that need to land between two statements."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from services.common.settings import Settings
from tests.conftest import own_settings
from tests.integration.publication.pubsupport import Driver
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_settings(kafka_bootstrap: str, store_backend: str, request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    yield from own_settings(kafka_bootstrap, store_backend, request, tmp_path_factory.mktemp("state"))


@pytest.fixture(scope="module")
def stack(module_settings: Settings) -> Iterator[Stack]:
    with Stack(module_settings, parts=("publication", "relay")) as running:
        yield running
        for part in ("publication", "relay"):
            process = running.processes.get(part)
            assert process is not None and process.poll() is None, f"{part} died:\n{running.log(part)[-4000:]}"


@pytest.fixture
def driver(isolated: Settings) -> Iterator[Driver]:
    with closing(Driver(isolated)) as driving:
        yield driving

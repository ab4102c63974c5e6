"""Fixtures for every tier.

The real tiers (integration, e2e, browser, fault) need Kafka and PostgreSQL:
``IMPRINT_KAFKA_BOOTSTRAP`` / ``IMPRINT_DATABASE_URL`` when set, otherwise
testcontainers when a Docker engine answers, otherwise a clear failure naming
``make infra-up`` — never a silent skip. Each test gets its own topic prefix and
PostgreSQL schema, so tests never see each other's messages or rows."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.settings import Settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(id): the SPEC rule this test proves")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    from tests.infra import kafka_bootstrap as resolve

    return resolve()


@pytest.fixture(scope="session")
def database_url() -> str:
    from tests.infra import database_url as resolve

    return resolve()


@pytest.fixture
def isolated(kafka_bootstrap: str, database_url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings for one test: its own topics (prefix), schema and HTTP port on 127.0.0.1."""
    from services.common.eventstore import ensure_schema
    from tests.support.kafka import create_topics

    tag = uuid.uuid4().hex[:10]
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        database_schema=f"t_{tag}",
        topic_prefix=f"t{tag}.",
        group_prefix=f"imprint-{tag}",
        state_dir=tmp_path / "state",
        http_host="127.0.0.1",
        http_port=free_port(),
    )
    ensure_schema(settings)
    create_topics(settings)
    yield settings
    from tests.support.postgres import drop_schema

    drop_schema(settings)

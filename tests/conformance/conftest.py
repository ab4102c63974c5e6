"""The conformance tier: the kit (``imprint conformance``) against a real stack — every part as
a process on real Kafka and PostgreSQL — directly and behind a real nginx. One stack per module,
so the kit's runs share one start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from services.common.settings import Settings
from tests.support.stack import Stack

ORIGIN = "http://front.conformance.test"
KEEPALIVE = 1.0


@pytest.fixture(scope="module")
def module_settings(kafka_bootstrap: str, store_backend: str, request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    from services.common.backends import backend_for
    from tests.support.kafka import create_topics
    from tests.support.net import free_port
    from tests.support.postgres import drop_schema

    tag = uuid.uuid4().hex[:10]
    postgres = store_backend == "postgres"
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=request.getfixturevalue("database_url") if postgres else None,
        database_schema=f"t_{tag}" if postgres else None,
        topic_prefix=f"t{tag}.", group_prefix=f"imprint-{tag}", state_dir=tmp_path_factory.mktemp("state"),
        http_host="127.0.0.1", http_port=free_port(),
        sse_keepalive_seconds=KEEPALIVE, stream_open_wait_seconds=1.0, stream_ticket_ttl_seconds=2.0,
        cors_origins=(ORIGIN,),
    )
    backend_for(settings).prepare()
    create_topics(settings)
    yield settings
    drop_schema(settings)


@pytest.fixture(scope="module")
def stack(module_settings: Settings) -> Iterator[Stack]:
    with Stack(module_settings) as running:
        yield running

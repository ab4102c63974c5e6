"""Where the integration/e2e tests find a real Kafka and a real PostgreSQL.

Order, for each of the two:

1. ``IMPRINT_KAFKA_BOOTSTRAP`` / ``IMPRINT_DATABASE_URL`` when set (``make infra-up``,
   i.e. ``bash deploy/local/infra.sh up``, starts both without Docker);
2. otherwise, when a Docker engine answers, a testcontainers container started once
   per interpreter and stopped at exit;
3. otherwise a ``RuntimeError`` that says what to do. Never a silent skip.
"""

from __future__ import annotations

import atexit
import os
from functools import cache
from typing import Any

KAFKA_ENV = "IMPRINT_KAFKA_BOOTSTRAP"
DATABASE_ENV = "IMPRINT_DATABASE_URL"
KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.2"  # testcontainers' KRaft mode needs a Confluent image
POSTGRES_IMAGE = "postgres:16"

_HOW_TO = (
    "run `make infra-up` (bash deploy/local/infra.sh up: Kafka and PostgreSQL without Docker) "
    f"and export {KAFKA_ENV}=127.0.0.1:9092 "
    f"{DATABASE_ENV}=postgresql://imprint:imprint@127.0.0.1:5432/imprint, or start a Docker engine"
)


def kafka_bootstrap() -> str:
    """``host:port`` of a Kafka broker for the tests."""
    if value := os.environ.get(KAFKA_ENV):
        return value
    _require_docker("Kafka", KAFKA_ENV)
    return _kafka_container()


def database_url() -> str:
    """``postgresql://user:password@host:port/db`` of a PostgreSQL database for the tests."""
    if value := os.environ.get(DATABASE_ENV):
        return value
    _require_docker("PostgreSQL", DATABASE_ENV)
    return _postgres_container()


def _require_docker(what: str, env: str) -> None:
    if not _docker_answers():
        raise RuntimeError(f"no {what} for the tests: {env} is not set and no Docker engine answers; {_HOW_TO}")


@cache
def _docker_answers() -> bool:
    try:
        from testcontainers.core.docker_client import DockerClient

        return bool(DockerClient(timeout=5).client.ping())
    except Exception:  # no SDK, no socket, engine down: all mean "no Docker"
        return False


def _keep_until_exit(container: Any) -> None:
    atexit.register(container.stop)


@cache
def _kafka_container() -> str:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.15
        from testcontainers.kafka import KafkaContainer

    container = KafkaContainer(KAFKA_IMAGE).with_kraft()
    container.start(timeout=120)
    _keep_until_exit(container)
    return str(container.get_bootstrap_server())


@cache
def _postgres_container() -> str:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.15
        from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(
        POSTGRES_IMAGE, username="imprint", password="imprint", dbname="imprint", driver=None
    )
    container.start()
    _keep_until_exit(container)
    return str(container.get_connection_url())

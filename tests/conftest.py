"""Fixtures for every tier.

The real tiers (integration, e2e, browser, fault) need Kafka and PostgreSQL:
``IMPRINT_KAFKA_BOOTSTRAP`` / ``IMPRINT_DATABASE_URL`` when set, otherwise
testcontainers when a Docker engine answers, otherwise a clear failure naming
``make infra-up`` — never a silent skip. Each test gets its own topic prefix and
PostgreSQL schema, so tests never see each other's messages or rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

from services.common.settings import Settings
from tests.support.net import free_port  # noqa: F401 - also imported from here by tier conftests


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers",
                            "rule(id): the rule this test proves (a P/R/X/D id, each defined in docs/rules.md)")
    config.addinivalue_line("markers", "backends(*names, reason): the store backends a test runs on (default: "
                                       "both); fewer than both names, in ``reason``, the mechanism only they have")
    config.addinivalue_line("markers", "fuzz: the bounded fuzz tier (hostile Kafka records on every consumed "
                                       "topic, schemathesis on the HTTP API); sized by --fuzz-values/--fuzz-requests")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz-values", type=int, default=10_000,
                     help="records per consumed topic in the Kafka fuzz tier (tests/integration/fuzz)")
    parser.addoption("--fuzz-seed", type=int, default=46, help="the fuzz tier's seed (printed by every fuzz test)")
    parser.addoption("--fuzz-requests", type=int, default=5_000,
                     help="HTTP requests the schemathesis fuzz tier sends per store backend (both: twice this)")


@pytest.fixture
def fuzz_values(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fuzz-values"))


@pytest.fixture
def fuzz_requests(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fuzz-requests"))


@pytest.fixture
def fuzz_seed(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--fuzz-seed"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fuzz tier's counts (what each fuzz test recorded as its ``fuzz`` property), after
    every run that had one; from the workers too (a report carries its properties)."""
    tables = [value for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
              if getattr(report, "when", "call") == "call"
              for name, value in getattr(report, "user_properties", ()) if name == "fuzz"]
    if tables:
        terminalreporter.section("fuzz tier")
        for table in tables:
            terminalreporter.write_line(table)


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.support.kafka import delete_created_topics

    delete_created_topics()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    from tests.infra import kafka_bootstrap as resolve

    return resolve()


@pytest.fixture(scope="session")
def database_url() -> str:
    """The tests' one PostgreSQL URL (``tests.infra.database_url``), checked once: an
    unreachable database fails every test that needs it, never skips it."""
    import psycopg

    from tests.infra import database_url as resolve

    url = resolve()
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError as error:
        raise RuntimeError(f"PostgreSQL not reachable at {url}: start it with `make infra-up`") from error
    return url


@pytest.fixture
def otel_collector(tmp_path: Path) -> Iterator[object]:
    """A real OpenTelemetry Collector for this test (``tests/support/otel.py``): its OTLP/HTTP
    endpoint and the spans it received."""
    from tests.support.otel import run_collector

    yield from run_collector(tmp_path)


@pytest.fixture
def topic_partitions() -> int:
    """Partitions of each of a test's topics. 1 here (the integration tier's in-process
    drivers read partition 0); the e2e, fault and browser tiers override it with
    :func:`several_partitions`."""
    return 1


def several_partitions() -> int:
    """The deployment's partition count (``IMPRINT_TOPIC_PARTITIONS``, default 6), for
    the tiers that run the real processes on several partitions."""
    return Settings(_env_file=None).topic_partitions  # type: ignore[call-arg]


STORE_BACKENDS = ("sqlite", "postgres")
"""The backends a deployment keeps its stores on: every test that runs imprint's stores
runs once on each (``store_backend``, or the ``backend`` fixture), unless it proves a mechanism
only one of them has, named beside its mark (``@pytest.mark.backends("postgres", reason=…)``:
several instances on one shared store, LISTEN/NOTIFY, advisory locks, a proxy or a restart of
the database server). :func:`pytest_collection_modifyitems` refuses a test on fewer backends
without that reason."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("backends")
    if not (marker and str(marker.kwargs.get("reason", "")).strip()):
        covered = set(store_backends_of(metafunc, marker))
        if not set(STORE_BACKENDS) <= covered:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid} touches a store on {sorted(covered)} only: a test runs on both backends, "
                "or names the mechanism only its backends have: @pytest.mark.backends(..., reason=...)")
    if "store_backend" in metafunc.fixturenames:
        names = marker.args if marker else STORE_BACKENDS
        assert set(names) <= set(STORE_BACKENDS), names
        # a module's shared stack (``module_settings``) keeps one backend for the whole module
        scope = "module" if "module_settings" in metafunc.fixturenames else "function"
        metafunc.parametrize("store_backend", names, scope=scope)


def store_backends_of(metafunc: pytest.Metafunc, marker: pytest.Mark | None) -> tuple[str, ...]:
    """The store backends a test's runs cover: its ``backends`` mark (``store_backend``), its
    ``backend`` parametrization (every backend unless narrowed), PostgreSQL alone when it asks
    for ``database_url`` directly; both when it touches no store."""
    names = metafunc.fixturenames
    if "store_backend" in names:
        return tuple(marker.args) if marker else STORE_BACKENDS
    if "backend" in names:
        for parametrized in metafunc.definition.iter_markers("parametrize"):
            argnames = parametrized.args[0]
            if "backend" in ([a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else argnames):
                return tuple(str(value) for value in parametrized.args[1])
        return STORE_BACKENDS
    if "database_url" in names:
        return ("postgres",)
    return STORE_BACKENDS


@pytest.fixture
def isolated(kafka_bootstrap: str, store_backend: str, request: pytest.FixtureRequest, tmp_path: Path,
             topic_partitions: int) -> Iterator[Settings]:
    """Settings for one test on one store backend: its own topics (prefix,
    ``topic_partitions`` each), its own stores (a PostgreSQL schema, or SQLite files under its
    own state folder) and HTTP port on 127.0.0.1."""
    yield from own_settings(kafka_bootstrap, store_backend, request, tmp_path / "state",
                            topic_partitions=topic_partitions)


def own_settings(kafka_bootstrap: str, store_backend: str, request: pytest.FixtureRequest, state_dir: Path,
                 **overrides: Any) -> Iterator[Settings]:
    """What :func:`isolated` yields, for any scope (a module's shared stack too): its own topic
    prefix, consumer groups, stores and HTTP port, with ``overrides``; the schema dropped after."""
    from services.common.backends import backend_for
    from tests.support.kafka import create_topics

    tag = uuid.uuid4().hex[:10]
    postgres = store_backend == "postgres"
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=request.getfixturevalue("database_url") if postgres else None,
        database_schema=f"t_{tag}" if postgres else None,
        topic_prefix=f"t{tag}.",
        group_prefix=f"imprint-{tag}",
        state_dir=state_dir,
        http_host="127.0.0.1",
        http_port=free_port(),
        **overrides,
    )
    backend_for(settings).prepare()
    create_topics(settings)
    yield settings
    from tests.support.postgres import drop_schema

    drop_schema(settings)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """Runs the test once per store backend (see ``tests/support/backends.py``)."""
    from services.common.backends import backend_for
    from tests.support.backends import backend_settings

    name = request.param
    if name != "postgres":
        yield backend_for(backend_settings(name, tmp_path / "state"))
        return
    from tests.support.postgres import drop_schema

    settings = backend_settings(name, tmp_path / "state", request.getfixturevalue("database_url"),
                                f"t_{uuid.uuid4().hex[:10]}")
    backend = backend_for(settings)
    backend.prepare()
    yield backend
    drop_schema(settings)

"""One test body, several stores: the ``backend`` fixture (tests/conftest.py) runs a
test once per store backend, the way eventsourcing's own tests run one test class per
persistence module (``WithSQLiteFile``, ``WithPostgres``).

It yields the deployment's own :class:`services.common.backends.Backend` — chosen from
the test's settings exactly as a part chooses it — so the test opens its stores the way
the services do (``open_log(backend.settings)``, ``ViewStore(backend.settings)``,
``RuntimeJournal(backend.environment("journal"), …)``) and never branches on its name:

- ``memory``: eventsourcing's in-memory recorders and an in-memory SQLite for tables;
- ``sqlite``: the embedded default, files under the test's own state folder;
- ``postgres``: the test database, in a schema of the test's own (dropped afterwards).

Choose a subset with ``@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)``;
a subset without one of the two store backends also names, in ``@pytest.mark.backends(…,
reason=…)``, the mechanism only its backend has (``tests/conftest.py`` refuses it otherwise)."""

from __future__ import annotations

from pathlib import Path

from services.common.backends import Backend, backend_for
from services.common.settings import Settings

BACKENDS = ("memory", "sqlite", "postgres")
STORE_BACKENDS = ("sqlite", "postgres")
"""The backends a store outlives its process on (what ``make run`` and production use)."""


def backend_settings(name: str, state_dir: Path, database_url: str | None = None, schema: str | None = None) -> Settings:
    """Settings that choose backend ``name`` (``database_url``/``schema``: PostgreSQL's)."""
    assert name in BACKENDS, name
    url = {"memory": "memory://", "sqlite": None, "postgres": database_url}[name]
    return Settings(state_dir=state_dir, database_url=url, database_schema=schema if name == "postgres" else None)


def memory_environment(application: str = "test") -> dict[str, str]:
    """The eventsourcing environment of an in-memory store (an application in one test)."""
    return backend_for(Settings(database_url="memory://")).environment(application)


__all__ = ["BACKENDS", "STORE_BACKENDS", "Backend", "backend_settings", "memory_environment"]

"""One test body, several stores: the ``backend`` fixture (tests/conftest.py) runs a
test once per persistence backend, the way eventsourcing's own tests run one test
class per persistence module (``WithSQLiteFile``, ``WithPostgres``).

A :class:`Backend` is configuration only — the test opens its store the way the
services do (``ViewStore(backend.settings)``, ``RuntimeJournal(backend.env("journal"))``)
and never branches on the backend's name:

- ``memory``: eventsourcing's POPO recorders (``env``); ``settings`` has no database
  (a store that has no in-memory form, such as Delivery's view store, is not run on it);
- ``sqlite``: the embedded default, files under the test's own state folder;
- ``postgres``: the test database, in a schema of the test's own (dropped afterwards).

Choose a subset with ``@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)``."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.eventstore import store_environment
from services.common.settings import Settings

BACKENDS = ("memory", "sqlite", "postgres")


@dataclass(frozen=True)
class Backend:
    name: str
    settings: Settings

    def env(self, application: str) -> dict[str, str]:
        """The eventsourcing ``env`` of ``application`` on this backend."""
        if self.name == "memory":
            return {"PERSISTENCE_MODULE": "eventsourcing.popo", "ORIGINATOR_ID_TYPE": "uuid"}
        return store_environment(self.settings, application)

    @property
    def durable(self) -> bool:
        """Whether what one store instance wrote is there for the next one (a restart)."""
        return self.name != "memory"

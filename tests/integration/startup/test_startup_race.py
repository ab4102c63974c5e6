"""Start-up is race-free (issue 10.4): every part, several instances each, opening its
stores at the same moment on a fresh PostgreSQL schema — the schema itself, the
Publication log and its tracking (Publication, the relay), the Journal's log, keyring
and message index, Delivery's view store — never fails.

``test_every_part_opens_its_stores_at_once_on_a_fresh_schema`` forks one process per
instance (no import time between them), holds them at a barrier and lets all of them
open the stores their ``serve`` opens at once, ten times over, each time on a new
schema. ``test_every_part_starts_for_real_on_a_fresh_schema`` starts the real
``imprint serve <part>`` processes (two of each) through the launcher, as ``imprint
up`` does, and waits until every one is ready."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator

import pytest

from services.common.backends import backend_for
from services.common.launcher import PARTS
from services.common.settings import Settings
from tests.support.net import free_port
from tests.support.postgres import drop_schema
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.backends("postgres", reason="parts creating one database's schema and tables at once")]

INSTANCES = 2
ROUNDS = 10


def open_stores(part: str, settings: Settings) -> None:
    """What ``imprint serve <part>`` opens before it consumes anything."""
    if part in ("publication", "relay"):  # the relay runs over the Publication log and its tracking
        from services.publication.application import open_log

        open_log(settings).close()
    elif part == "journal":
        from services.journal.application import RuntimeJournal

        RuntimeJournal.from_settings(settings).close()
    elif part == "delivery":
        from services.delivery.view_store import ViewStore

        backend_for(settings).prepare()
        backend_for(settings).open(lambda: ViewStore(settings)).close()
    else:
        raise ValueError(part)


def instance(part: str, settings: Settings, barrier: multiprocessing.synchronize.Barrier,
             results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    barrier.wait(timeout=60)
    try:
        open_stores(part, settings)
    except BaseException as error:  # noqa: BLE001 - reported to the test, which fails on it
        results.put((part, f"{type(error).__name__}: {error}"))
    else:
        results.put((part, None))


@pytest.fixture
def fresh_schemas(isolated: Settings) -> Iterator[list[Settings]]:
    """``ROUNDS`` settings, each on a schema that does not exist yet (dropped afterwards)."""
    rounds = [isolated.model_copy(update={"database_schema": f"t_{uuid.uuid4().hex[:10]}"}) for _ in range(ROUNDS)]
    yield rounds
    for settings in rounds:
        drop_schema(settings)


@pytest.mark.rule("P15")
@pytest.mark.rule("D1")
def test_every_part_opens_its_stores_at_once_on_a_fresh_schema(fresh_schemas: list[Settings]) -> None:
    fork = multiprocessing.get_context("fork")
    outcomes: list[list[tuple[str, str | None]]] = []
    for settings in fresh_schemas:
        parts = [part for part in PARTS for _ in range(INSTANCES)]
        barrier, results = fork.Barrier(len(parts)), fork.Queue()
        processes = [fork.Process(target=instance, args=(part, settings, barrier, results)) for part in parts]
        for process in processes:
            process.start()
        outcomes.append(sorted((results.get(timeout=120) for _ in processes), key=lambda r: (r[0], r[1] or "")))
        for process in processes:
            process.join(timeout=30)
        assert [process.exitcode for process in processes] == [0] * len(processes)
    failures = [(n, part, error) for n, round_ in enumerate(outcomes) for part, error in round_ if error]
    assert failures == [], "every instance of every part came up in every round"
    assert [sorted(part for part, _ in round_) for round_ in outcomes] == \
        [sorted(part for part in PARTS for _ in range(INSTANCES))] * ROUNDS


@pytest.mark.rule("P15")
@pytest.mark.rule("D1")
def test_every_part_starts_for_real_on_a_fresh_schema(fresh_schemas: list[Settings]) -> None:
    settings = fresh_schemas[0]
    with Stack(settings, parts=()) as stack:
        for part in PARTS:
            for n in range(1, INSTANCES + 1):
                own = settings.model_copy(update={"http_port": free_port()}) if part == "delivery" else settings
                stack.start(part, name=f"{part}-{n}", settings=own)
        stack.wait_ready(timeout=120)
        assert sorted(name for name in stack.children if stack.ready(name)) == \
            sorted(f"{part}-{n}" for part in PARTS for n in range(1, INSTANCES + 1))

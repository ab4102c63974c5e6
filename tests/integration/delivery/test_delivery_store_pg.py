"""The view store on PostgreSQL shared by two instances: when a rebalance lets the old
and the new owner of a partition apply overlapping polls at the same moment, every
message is applied once (the second reads the position only after the first committed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.view_store import ViewStore
from tests.support.delivery_builders import progress, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120),
              pytest.mark.backends("postgres", reason="row locks and advisory locks between two connections "
                                                    "to one shared store")]

RUNS = "imprint.runs.v1"


@pytest.fixture
def stores(isolated: Settings) -> Iterator[tuple[ViewStore, ViewStore]]:
    first, second = ViewStore(isolated), ViewStore(isolated)
    yield first, second
    first.close()
    second.close()


def blocked_by(connection: psycopg.Connection, root: int) -> set[int]:
    """Backends waiting, directly or through one another, on ``root``."""
    rows = connection.execute("SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database()").fetchall()
    waiting, grew = {root}, True
    while grew:
        grew = False
        for pid, blockers in rows:
            if pid not in waiting and set(blockers or ()) & waiting:
                waiting.add(pid)
                grew = True
    return waiting - {root}


@pytest.mark.rule("D1")
def test_overlapping_polls_of_two_instances_apply_each_message_once(
        isolated: Settings, stores: tuple[ViewStore, ViewStore]) -> None:
    old_owner, new_owner = stores
    run = "run-rebalance"
    old_owner.process([Inbound(RUNS, 0, 0, running(run))])
    # Progress notes: unlike a block's receipt, applying one twice would show twice.
    messages = [Inbound(RUNS, 1, offset, progress(run, f"step {offset}"))
                for offset in range(15)]
    table = sql.Identifier(isolated.database_schema or "", "delivery_runs")
    assert isolated.database_url is not None
    with psycopg.connect(isolated.database_url) as holder:
        # Hold the run row so both polls are in flight together, then let them race.
        holder.execute(sql.SQL("SELECT 1 FROM {} WHERE run_id = %s FOR UPDATE").format(table), (run,))
        holder_pid = holder.info.backend_pid
        results: dict[str, list[str]] = {}
        errors: list[BaseException] = []

        def poll(store: ViewStore, name: str, batch: list[Inbound]) -> None:
            try:
                results[name] = store.process(batch)
            except BaseException as error:
                errors.append(error)

        # The old owner's poll (offsets 0-9) gets in line first, then the new owner's (0-14).
        threads = []
        with psycopg.connect(isolated.database_url, autocommit=True) as watcher:
            for waiting, (store, name, batch) in enumerate(((old_owner, "old", messages[:10]),
                                                           (new_owner, "new", messages)), start=1):
                thread = threading.Thread(target=poll, args=(store, name, batch))
                thread.start()
                threads.append(thread)
                deadline = time.monotonic() + 30
                while len(blocked_by(watcher, holder_pid)) < waiting:
                    assert time.monotonic() < deadline, f"the {name} owner's poll never got in flight"
                    time.sleep(0.02)
        holder.rollback()
    for thread in threads:
        thread.join(30)
    assert not errors and set(results) == {"old", "new"}, errors
    frames = old_owner.frames_after(run, 0, limit=100)
    assert [f.id for f in frames] == list(range(1, 17)), "one run status and fifteen progress notes, each once"
    assert old_owner.position(RUNS, 1) == 14


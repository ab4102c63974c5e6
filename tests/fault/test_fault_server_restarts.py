"""The servers themselves fail mid-stream (issue 10.7): the PostgreSQL server is stopped
with ``pg_ctl -m immediate`` (every backend gone at once, crash recovery on start) and
started again; the Kafka broker is SIGKILLed and started again. Both run under a steady
load of proposals from several runs, with source revocations in the middle and a real
SSE client per run, and end in the shared invariant check
(:func:`tests.fault.invariants.check_invariants`).

These restart a server, so they run on a PostgreSQL and a Kafka of their own
(:class:`tests.fault.private_infra.PrivateInfra`, ``deploy/local`` on free ports with a
private state dir), never on the shared ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.settings import Settings
from tests.fault.invariants import check_invariants, proves_the_invariants
from tests.fault.parts import Parts
from tests.fault.private_infra import PrivateInfra
from tests.fault.workload import Workload, private_settings

pytestmark = [pytest.mark.fault, pytest.mark.timeout(420)]
STARTED = "===== kafka.sh up"  # deploy/local/kafka.sh marks every start in the broker's log


@pytest.fixture(scope="module")
def infra() -> Iterator[PrivateInfra]:
    servers = PrivateInfra(partitions=3).up()
    try:
        yield servers
    finally:
        servers.down()


@pytest.fixture
def settings(infra: PrivateInfra, tmp_path: Path) -> Settings:
    return private_settings(infra.bootstrap, infra.database_url, tmp_path, partitions=3)


def under_load(settings: Settings, disturb: Callable[[Workload], None]) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """Every part serving a steady load; ``disturb`` strikes once 30 % is accepted; then the
    load is finished and checked. Returns the invariant check's report and the parts' own exits."""
    with Parts(settings) as parts:
        parts.serve_all()
        load = Workload(settings, parts.delivery_urls).start()
        try:
            load.wait_accepted(0.3)
            disturb(load)
            load.finish(timeout=240)
        finally:
            load.stop()
        return check_invariants(settings, load, parts.delivery_urls), list(parts.exits)


@proves_the_invariants
def test_postgres_restarted_mid_stream_loses_nothing_and_applies_nothing_twice(
    infra: PrivateInfra, settings: Settings
) -> None:
    def restart(load: Workload) -> None:
        infra.kill_postgres()
        load.wait_accepted(0.5)  # the runtime keeps proposing while the database is gone
        infra.start_postgres()

    report, exits = under_load(settings, restart)
    print(f"\npostgres restart: {report}; parts that exited on their own and were restarted: {exits}")
    server_log = infra.log("postgres.log")
    assert "immediate shutdown request" in server_log and "not properly shut down" in server_log, \
        "the server really crashed (immediate stop) and ran crash recovery on start"


@proves_the_invariants
def test_kafka_broker_killed_and_restarted_mid_stream_loses_nothing_and_applies_nothing_twice(
    infra: PrivateInfra, settings: Settings
) -> None:
    starts: list[int] = []

    def restart(load: Workload) -> None:
        starts.append(infra.log("kafka.log").count(STARTED))
        infra.kill_kafka()  # SIGKILL: no controlled shutdown
        infra.start_kafka()

    report, exits = under_load(settings, restart)
    print(f"\nkafka restart: {report}; parts that exited on their own and were restarted: {exits}")
    assert infra.kills[-1] == "kafka"
    assert infra.log("kafka.log").count(STARTED) > starts[0], "the broker really started again"

"""A real 3-broker KRaft cluster (issue 12.5): ``deploy/local/kafka-cluster.sh`` on free
loopback ports with its own state dir; every topic with replication factor 3 and
``min.insync.replicas=2``; imprint's producers idempotent with ``acks=all``. The broker
leading the runtime topic's first partition is SIGKILLed mid-stream, the load goes on
with two brokers, then the broker is started again and rejoins every ISR. Nothing the
cluster acknowledged is lost and no consumer applies anything twice: the shared
invariant check (:func:`tests.fault.invariants.check_invariants`) holds.

Own marker (``cluster``): ``make test-cluster`` runs this tier alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from imprint.contracts.topics import Topic
from services.common.settings import Settings
from tests.fault.invariants import check_invariants, proves_the_invariants
from tests.fault.parts import Parts
from tests.fault.private_infra import PrivateInfra
from tests.fault.workload import Workload, private_settings

pytestmark = [pytest.mark.cluster, pytest.mark.fault, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateInfra]:
    servers = PrivateInfra(brokers=3, partitions=3).up()
    try:
        yield servers
    finally:
        servers.down()


async def describe(settings: Settings, topic: Topic) -> list[dict]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        (description,) = await admin.describe_topics([settings.topic(topic)])
        return list(description["partitions"])
    finally:
        await admin.close()


def wait_full_isr(settings: Settings, timeout: float = 120) -> None:
    """Every partition of every topic has all three replicas in sync again."""
    deadline = time.monotonic() + timeout
    while True:
        lagging = [(t.value, p["partition"], p["isr"]) for t in Topic
                   for p in asyncio.run(describe(settings, t)) if len(p["isr"]) < 3]
        if not lagging:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"replicas never caught up: {lagging}")
        time.sleep(1)


@proves_the_invariants
def test_a_broker_killed_mid_stream_loses_nothing_committed_and_duplicates_no_effect(
    cluster: PrivateInfra, tmp_path: Path
) -> None:
    settings = private_settings(cluster.bootstrap, cluster.database_url, tmp_path, partitions=3,
                                replication=3, min_insync=2)
    partitions = asyncio.run(describe(settings, Topic.RUNTIME))
    assert all(len(p["replicas"]) == 3 for p in partitions), "replication factor 3"
    leader = next(p["leader"] for p in partitions if p["partition"] == 0)
    with Parts(settings) as parts:
        parts.serve_all()
        load = Workload(settings, parts.delivery_urls).start()
        try:
            load.wait_accepted(0.3)
            cluster.kill_kafka(leader)  # SIGKILL the leader of the runtime topic's partition 0
            load.wait_accepted(0.6)  # two brokers still make min.insync.replicas=2: the load goes on
            moved = next(p["leader"] for p in asyncio.run(describe(settings, Topic.RUNTIME)) if p["partition"] == 0)
            cluster.start_kafka(leader)
            load.finish(timeout=300)
        finally:
            load.stop()
        wait_full_isr(settings)
        report = check_invariants(settings, load, parts.delivery_urls)
        exits = list(parts.exits)
    print(f"\n3-broker cluster, broker {leader} killed: {report}; parts restarted after exiting: {exits}")
    assert moved != leader, "another broker took the partition's leadership while the leader was dead"

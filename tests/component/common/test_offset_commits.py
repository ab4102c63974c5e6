"""How a tracked consumer commits its Kafka offsets (R1: what was applied is never skipped
by a restart; the store's tracking records are the truth, an offset only shortens the
redelivery). Offsets go out at most once per interval, the last batch of a busy spell is
still committed, a commit never reaches past an applied batch, and partitions about to be
revoked are committed before they go."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from services.common.subscription import OffsetCommits

TOPIC = "imprint.runtime.v1"


class RecordingClient:
    """Stands in for the aiokafka consumer's ``commit``: what was committed, and when."""

    def __init__(self, delay: float = 0.0) -> None:
        self.commits: list[tuple[float, dict[TopicPartition, int]]] = []
        self.delay = delay

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await asyncio.sleep(self.delay)
        self.commits.append((asyncio.get_running_loop().time(), dict(offsets)))


def records(partition: int, *offsets: int) -> list[ConsumerRecord[Any, Any]]:
    return [ConsumerRecord(TOPIC, partition, offset, 0, 0, None, b"", None, 0, 0, []) for offset in offsets]


def tp(partition: int) -> TopicPartition:
    return TopicPartition(TOPIC, partition)


@pytest.mark.rule("R1")
def test_a_busy_spell_commits_once_per_interval_and_its_last_batch_after_it() -> None:
    async def scenario() -> RecordingClient:
        client = RecordingClient()
        commits = OffsetCommits("test", interval=0.2)
        for offset in range(20):  # 20 polls of one message, 10 ms apart: 0.2 s of traffic
            commits.applied(client, records(0, offset))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.4)
        return client

    client = asyncio.run(scenario())
    assert len(client.commits) in (2, 3), f"one commit per 0.2 s, not one per poll: {len(client.commits)}"
    assert client.commits[0][1] == {tp(0): 1}, "the first applied batch is committed at once"
    assert client.commits[-1][1] == {tp(0): 20}, "the last batch of the spell is committed after it"
    gaps = [b[0] - a[0] for a, b in zip(client.commits, client.commits[1:])]
    assert all(gap >= 0.19 for gap in gaps), gaps


@pytest.mark.rule("R1")
def test_a_commit_carries_only_applied_batches_per_partition() -> None:
    async def scenario() -> RecordingClient:
        client = RecordingClient(delay=0.05)  # slow commits: later batches wait for the one in flight
        commits = OffsetCommits("test", interval=0.0)
        commits.applied(client, records(0, 5, 6))
        commits.applied(client, records(1, 3))
        commits.applied(client, records(0, 7))
        await asyncio.sleep(0.3)
        return client

    client = asyncio.run(scenario())
    assert [offsets for _, offsets in client.commits] == [{tp(0): 7}, {tp(0): 8, tp(1): 4}], (
        "one commit in flight; the next carries every batch applied meanwhile, each at its own end")


@pytest.mark.rule("R1")
def test_partitions_about_to_be_revoked_are_committed_first() -> None:
    async def scenario() -> RecordingClient:
        client = RecordingClient()
        commits = OffsetCommits("test", interval=60.0)
        commits.applied(client, records(0, 1))  # committed at once
        commits.applied(client, records(0, 2))  # pending: the interval has not passed
        commits.applied(client, records(1, 9))  # pending
        await asyncio.sleep(0.01)
        await commits.revoked([tp(1)])
        return client

    client = asyncio.run(scenario())
    assert [offsets for _, offsets in client.commits] == [{tp(0): 2}, {tp(1): 10}], (
        "the revoked partition's applied offset is committed before it goes; the kept one waits")

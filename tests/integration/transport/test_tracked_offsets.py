"""The Kafka offset a tracked consumer commits (SPEC §7: at-least-once on the wire, exactly
once in effect; R1: what was committed is never lost, what was not is redelivered).

A tracked consumer commits a batch's offset only after its store recorded the batch, and
that commit travels while the next poll runs. The offset it commits must be the batch's
own end, not the consumer's position: the next poll has often moved that position already,
and a crash before the next batch is applied must redeliver it, not skip it. Found by the
Journal's relay failover test: a SIGKILL at that moment lost one run's lifecycle."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from imprint.contracts.registry import encode
from imprint.contracts.runtime import RunQueued
from imprint.contracts.topics import Topic
from services.common.inbound import Inbound
from services.common.kafka import Outbox, make_broker
from services.common.subscription import subscribe_tracked
from services.common.settings import Settings
from tests.support.kafka import produce

pytestmark = pytest.mark.integration


async def committed_offset(settings: Settings, group: str, topic: str) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()


@pytest.mark.rule("R1")
def test_the_committed_offset_is_the_applied_batch_not_the_next_poll(isolated: Settings) -> None:
    s = isolated
    messages = [RunQueued(run_id="run-offsets") for _ in range(9)]
    asyncio.run(produce(s, Topic.RUNTIME, *messages))

    async def scenario() -> tuple[list[list[int]], int | None]:
        batches: list[list[int]] = []
        second_batch_held = asyncio.Event()
        never = asyncio.Event()

        async def handle(inbound: list[Inbound]) -> None:
            batches.append([item.offset for item in inbound])
            if len(batches) == 2:  # the process "dies" here: this batch is never applied
                second_batch_held.set()
                await never.wait()

        broker = make_broker(s, "offsets-test")
        outbox = Outbox(s, "offsets-test")
        subscribe_tracked(broker, s, outbox, consumer="offsets", topics=[Topic.RUNTIME],
                          handle=handle, max_records=3)
        await outbox.start()
        await broker.start()
        try:
            await asyncio.wait_for(second_batch_held.wait(), timeout=30)
            await asyncio.sleep(1.0)  # the first batch's commit has long landed
            return batches, await committed_offset(s, f"{s.group_prefix}.offsets", s.topic(Topic.RUNTIME))
        finally:
            never.set()
            await broker.stop()
            await outbox.stop()

    batches, committed = asyncio.run(scenario())
    first, second = batches[0], batches[1]
    assert first and second and second[0] == first[-1] + 1
    assert committed == first[-1] + 1, (
        f"the commit covers the applied batch {first}, never the polled one {second}: committed {committed}")


@pytest.mark.rule("R1")
@pytest.mark.parametrize("gather_ms", [0, 200])
def test_a_gathering_consumer_polls_a_trickle_in_fewer_batches_and_loses_nothing(isolated: Settings,
                                                                                 gather_ms: int) -> None:
    """``gather_ms`` (the Journal's fetches): the broker holds a fetch to gather the records
    that trickle in meanwhile, so a steady trickle arrives in a few larger polls. Every
    record is still handed over once, in order."""
    s, n = isolated, 40

    async def scenario() -> list[list[int]]:
        batches: list[list[int]] = []

        async def handle(inbound: list[Inbound]) -> None:
            batches.append([item.offset for item in inbound])

        broker = make_broker(s, "gather-test")
        outbox = Outbox(s, "gather-test")
        subscribe_tracked(broker, s, outbox, consumer=f"gather-{gather_ms}", topics=[Topic.RUNTIME],
                          handle=handle, gather_ms=gather_ms)
        await outbox.start()
        await broker.start()
        try:
            producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, enable_idempotence=True)
            await producer.start()
            try:
                message = RunQueued(run_id="run-gather")
                for record in range(n + 1):  # a first record, then a trickle: one every 10 ms, one partition
                    await producer.send_and_wait(s.topic(Topic.RUNTIME), encode(message), key=b"run-gather",
                                                 headers=[("type", message.type.encode())])
                    if record == 0:  # handed over: the consumer joined its group and polls an empty topic
                        for _ in range(600):
                            if batches:
                                break
                            await asyncio.sleep(0.1)
                        assert batches == [[0]], f"the first record alone, in its own poll: {batches}"
                        batches.clear()
                    else:
                        await asyncio.sleep(0.01)
            finally:
                await producer.stop()
            for _ in range(300):
                if sum(map(len, batches)) >= n:
                    break
                await asyncio.sleep(0.1)
            return batches
        finally:
            await broker.stop()
            await outbox.stop()

    batches = asyncio.run(scenario())
    offsets = sorted(offset for batch in batches for offset in batch)
    assert offsets == list(range(1, n + 1)), "every record of the trickle once"
    if gather_ms:
        assert len(batches) <= n // 4, f"a trickle of {n} records gathered into a few polls, not {len(batches)}"
    else:
        assert len(batches) > n // 4, "without gathering, a trickle is polled nearly record by record"


def test_a_handled_poll_is_freed_without_the_cyclic_collector(isolated: Settings) -> None:
    """A poll (its records, their keys, values and headers) is freed by reference counting
    once it is handled: nothing of it waits in a reference cycle for the collector, whose
    young collections otherwise walked thousands of such objects, tens of milliseconds a
    time, under load."""
    s = isolated
    asyncio.run(produce(s, Topic.RUNTIME, *(RunQueued(run_id="run-freed") for _ in range(9))))

    async def scenario() -> list[weakref.ref[Any]]:
        polls: list[weakref.ref[Any]] = []
        handled = asyncio.Event()

        async def handle(inbound: list[Inbound]) -> None:
            if len(polls) >= 3:
                handled.set()

        def observe(records: Sequence[Any]) -> None:
            polls.append(weakref.ref(records[0]))

        broker = make_broker(s, "freed-test")
        outbox = Outbox(s, "freed-test")
        subscribe_tracked(broker, s, outbox, consumer="freed", topics=[Topic.RUNTIME], handle=handle,
                          max_records=3, observe=observe)
        await outbox.start()
        await broker.start()
        try:
            await asyncio.wait_for(handled.wait(), timeout=30)
            await asyncio.sleep(1.0)  # the consumer polls on, empty
            return polls
        finally:
            await broker.stop()
            await outbox.stop()

    gc.collect()
    gc.disable()  # only reference counting frees anything now
    try:
        polls = asyncio.run(scenario())
        alive = [ref() for ref in polls if ref() is not None]
    finally:
        gc.enable()
    assert len(polls) >= 3
    assert alive == [], f"{len(alive)} of {len(polls)} handled polls still held"

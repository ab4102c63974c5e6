"""The outbox: how every part and relay produces (SPEC §2: Kafka key = ``run_id``, sources
topic: ``source_id``, so one run's events stay ordered in one partition; header ``type``
repeats the type). Previews and publications of one run leave in the order they were sent
(P14: a run's preview goes out before the publication relayed from its commit)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from imprint.contracts.registry import decode
from imprint.contracts.runtime import RunQueued
from imprint.contracts.sources import SourceRegistered
from imprint.contracts.topics import Topic
from services.common.kafka import Outbox
from services.common.settings import Settings

pytestmark = pytest.mark.integration


async def read_back(settings: Settings, topic: Topic, count: int) -> list[tuple[bytes | None, dict[str, bytes], Any, int]]:
    consumer = AIOKafkaConsumer(settings.topic(topic), bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        records = []
        deadline = asyncio.get_running_loop().time() + 30
        while len(records) < count and asyncio.get_running_loop().time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        return [(r.key, dict(r.headers), decode(topic, r.value), r.partition) for r in records]
    finally:
        await consumer.stop()


@pytest.mark.rule("P14")
def test_the_outbox_keys_each_message_by_its_run_or_source_and_keeps_a_runs_order(isolated: Settings) -> None:
    runs = [f"run-outbox-{i}" for i in range(4)]
    sent = [RunQueued(run_id=run) for _ in range(5) for run in runs]
    source = SourceRegistered(source_id="src:public:outbox", scope="public", owner_account_id="acct-outbox")

    async def scenario() -> tuple[list[Any], list[Any]]:
        outbox = Outbox(isolated, "outbox-test")
        with pytest.raises(RuntimeError, match="before it was started"):
            await outbox.send_many([(Topic.RUNTIME, sent[0])])
        await outbox.start()
        try:
            await outbox.publish_many((Topic.RUNTIME, message) for message in sent)
            await outbox.publish(Topic.SOURCES, source)
        finally:
            await outbox.stop()
        return await read_back(isolated, Topic.RUNTIME, len(sent)), await read_back(isolated, Topic.SOURCES, 1)

    runtime, sources = asyncio.run(scenario())
    assert len(runtime) == len(sent)
    for key, headers, message, _ in runtime:
        assert key == message.run_id.encode() and headers == {"type": message.type.encode()}
    for run in runs:  # one run: one partition, in the order sent
        mine = [(m.event_id, partition) for _, _, m, partition in runtime if m.run_id == run]
        assert [event_id for event_id, _ in mine] == [m.event_id for m in sent if m.run_id == run]
        assert len({partition for _, partition in mine}) == 1
    [(key, headers, message, _)] = sources
    assert key == b"src:public:outbox" and headers == {"type": source.type.encode()} and message == source

"""Helpers for the Publication integration tests: message builders, producing to the
real topics, waiting for a run's outcomes on ``imprint.publication.v1``, reading the
Publication log (PostgreSQL) through a fresh :class:`PublicationLog`, and an
in-process driver that feeds ``PublicationLog.process`` with records read back from
the real runtime/sources topics (real offsets, real decoding and dead-lettering).

Nothing here mocks Kafka, PostgreSQL or HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from imprint.contracts.base import Message
from imprint.contracts.registry import topic_of
from imprint.contracts.runtime import (
    AnswerPart,
    EvidenceGranted,
    NumericIssued,
    QuestionConditionSet,
    RunAdmitted,
)
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun

from services.common.inbound import Inbound
from services.common.kafka import Outbox, decode_records, make_broker
from services.common.settings import Settings
from services.publication.application import PublicationLog
from services.publication.application import open_log
from services.common.relay import Relay
from services.publication.relay import RELAY_NAME, announce_publication
from tests.support.kafka import produce, read_topic

ACCOUNT = "acct-1"

Values = list[dict[str, Any]]


# --------------------------------------------------------------------------- builders


def admitted(run: str, account: str = ACCOUNT) -> RunAdmitted:
    return RunAdmitted(
        run_id=run, account_id=account, conversation_id=f"conv-{run}", message_id=f"msg-{run}",
        question="What does the annual report say?", qcs=QuestionConditionSet(qcs_id=f"qcs-{run}"),
    )


def granted(run: str, source: str, scope: str = "public", owner: str = "publisher") -> EvidenceGranted:
    return EvidenceGranted(run_id=run, source_id=source, scope=scope, owner_account_id=owner,  # type: ignore[arg-type]
                           title=f"title of {source}")


def numeric(run: str, handle: str, value: str, source: str | None = None, version: int = 1) -> NumericIssued:
    return NumericIssued(run_id=run, handle_id=handle, value=value, unit="%", version=version,  # type: ignore[arg-type]
                         source_id=source)


def part(run: str, call: str, markdown: str | None = None, **arguments: Any) -> AnswerPart:
    args = dict(arguments)
    if markdown is not None:
        args["markdown"] = markdown
    return AnswerPart(run_id=run, turn_id="turn-1", tool_call_id=call, sealed=True, arguments=args)


def registered(source: str, scope: str = "public", owner: str = "publisher") -> SourceRegistered:
    return SourceRegistered(source_id=source, scope=scope, owner_account_id=owner)  # type: ignore[arg-type]


def revoked(source: str, account: str | None = None) -> SourceRevoked:
    return SourceRevoked(source_id=source, account_id=account, reason="withdrawn by publisher")


def tombstoned(source: str) -> SourceTombstoned:
    return SourceTombstoned(source_id=source)


# --------------------------------------------------------------------------- Kafka


def send(settings: Settings, *messages: Message) -> None:
    """Produce in order, each to its contract topic (runtime or sources)."""

    async def go() -> None:
        for message in messages:
            await produce(settings, topic_of(message), message)

    if len({topic_of(m) for m in messages}) <= 1 and messages:
        asyncio.run(produce(settings, topic_of(messages[0]), *messages))
    else:
        asyncio.run(go())


async def committed_offset(settings: Settings, consumer: str, topic: Topic, partition: int = 0) -> int:
    """The next offset the consumer group has committed on ``topic`` (-1: nothing committed)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        tp = TopicPartition(settings.topic(topic), partition)
        offsets = await admin.list_consumer_group_offsets(f"{settings.group_prefix}.{consumer}", partitions=[tp])
        found = offsets.get(tp)
        return -1 if found is None else found.offset
    finally:
        await admin.close()


def wait_committed(settings: Settings, consumer: str, topic: Topic, past: int, timeout: float = 20.0) -> int:
    """Wait until the group's committed offset is beyond ``past`` (the consumer is done with it)."""
    deadline = time.monotonic() + timeout
    while True:
        committed = asyncio.run(committed_offset(settings, consumer, topic))
        if committed > past:
            return committed
        if time.monotonic() > deadline:
            raise AssertionError(f"{consumer} never committed past offset {past} of {topic} (at {committed})")
        time.sleep(0.2)


def of_run(values: Values, run: str) -> Values:
    return [v for v in values if v.get("run_id") == run]


def wait_run(settings: Settings, run: str, until: Callable[[Values], bool], timeout: float = 30.0) -> Values:
    """``imprint.publication.v1`` from the start, until ``until`` holds for this run's messages."""
    values = asyncio.run(read_topic(settings, Topic.PUBLICATION, until=lambda vs: until(of_run(vs, run)),
                                   timeout=timeout))
    return of_run(values, run)


def published(values: Values) -> Values:
    return [v for v in values if v["type"] == "answer.published"]


def of_type(values: Values, kind: str) -> Values:
    return [v for v in values if v["type"] == kind]


def has_published(markdown_prefix: str) -> Callable[[Values], bool]:
    return lambda vs: any(v["block"]["content"]["markdown"].startswith(markdown_prefix) for v in published(vs))


def count(kind: str, n: int) -> Callable[[Values], bool]:
    return lambda vs: len(of_type(vs, kind)) >= n


def dedupe(values: Values) -> Values:
    """Consumers dedupe by ``event_id`` (SPEC §7): the first copy of each."""
    seen: set[str] = set()
    out: Values = []
    for value in values:
        if value["event_id"] not in seen:
            seen.add(value["event_id"])
            out.append(value)
    return out


# --------------------------------------------------------------------------- the log


@contextmanager
def log_of(settings: Settings) -> Iterator[PublicationLog]:
    """A fresh PublicationLog over the test's schema: reads what is committed."""
    with closing(open_log(settings)) as app:
        yield app


def read_run(settings: Settings, run: str) -> PublicationRun:
    with log_of(settings) as app:
        found = app.run(run)
    assert found is not None, f"run {run} is not in the Publication log"
    return found


def run_events(settings: Settings, run: str) -> list[Any]:
    with log_of(settings) as app:
        return list(app.events.get(PublicationRun.id_for(run)))


def event_names(events: Sequence[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


# --------------------------------------------------------------------------- in-process driver


class Driver:
    """Drives a real :class:`PublicationLog` in this process.

    ``feed`` produces messages to the real topics, reads them back (real offsets,
    sizes and decoding; refusals are dead-lettered for real) and hands the decoded
    records to ``PublicationLog.process`` as one poll per topic partition, with an
    ``emit`` that publishes to the real ``imprint.publication.v1``. ``relay`` runs
    the real relay over the same log until it has nothing left."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = open_log(settings)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="driver-loop", daemon=True)
        self._thread.start()
        self.broker = make_broker(settings, "imprint-test-driver")
        self.call(self.broker.start())
        self.outbox = Outbox(settings, "imprint-test-driver")
        self.call(self.outbox.start())
        self.relay_ = Relay(self.app, announce_publication, self.outbox, name=RELAY_NAME)
        self.relay_.position = self.relay_.recorded_position()
        self.emitted: list[tuple[Topic, Message]] = []
        self.before_emit: Callable[[Sequence[tuple[Topic, Message]]], None] | None = None
        self.consumer: AIOKafkaConsumer = self.call(self._start_consumer())

    def call(self, coroutine: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start_consumer(self) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap, enable_auto_commit=False,
                                    group_id=None)
        await consumer.start()
        partitions = [TopicPartition(self.settings.topic(t), 0) for t in (Topic.RUNTIME, Topic.SOURCES)]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        return consumer

    def emit(self, items: Sequence[tuple[Topic, Message]]) -> None:
        """What the service's ``emit`` does: publish and wait for the acknowledgements."""
        if self.before_emit is not None:
            self.before_emit(items)
        self.call(self.outbox.publish_many(list(items)), timeout=30)
        self.emitted.extend(items)

    def produce(self, *messages: Message | tuple[Topic, bytes]) -> None:
        async def go() -> None:
            for message in messages:
                if isinstance(message, tuple):
                    topic, raw = message
                    await self.broker.publish(raw, self.settings.topic(topic))
                else:
                    await self.outbox.publish(topic_of(message), message)

        self.call(go())

    def poll(self, expected: int, timeout: float = 20) -> list[Inbound]:
        """Read ``expected`` more records from the runtime/sources topics and decode them
        exactly as the service does (refusals go to the dead-letter topic)."""

        async def go() -> list[Any]:
            records: list[Any] = []
            deadline = time.monotonic() + timeout
            while len(records) < expected:
                if time.monotonic() > deadline:
                    raise AssertionError(f"only {len(records)} of {expected} records arrived")
                batch = await self.consumer.getmany(timeout_ms=200)
                for tp_records in batch.values():
                    records.extend(tp_records)
            return records

        records = self.call(go())
        inbound, refused = decode_records(self.settings, "publication", records)
        if refused:
            self.call(self.outbox.publish_many((Topic.DEADLETTER, letter) for letter in refused))
        return inbound

    def feed(self, *messages: Message | tuple[Topic, bytes]) -> list[Inbound]:
        """Produce, read back, and process as one poll per partition (like one consumer poll)."""
        self.produce(*messages)
        inbound = self.poll(len(messages))
        self.process(inbound)
        return inbound

    def process(self, inbound: list[Inbound]) -> None:
        ordered = sorted(inbound, key=lambda i: (i.topic, i.partition, i.offset))
        self.app.process(ordered, self.emit)

    def relay(self) -> int:
        """Relay everything committed so far; returns how many log positions were covered."""
        total = 0
        while covered := self.call(self.relay_.relay_once()):
            total += covered
        return total

    def run(self, run_id: str) -> PublicationRun:
        found = self.app.run(run_id)
        assert found is not None
        return found

    def close(self) -> None:
        try:
            self.call(self.consumer.stop())
            self.call(self.broker.stop())
            self.call(self.outbox.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            self.app.close()

"""The runtime SDK's transport adapter: the one module of ``imprint.runtime`` that does I/O.

(With :mod:`imprint.runtime.pydantic_ai`, the only I/O allowed under ``libs/``;
everything else there is pure.)

* :class:`KafkaTransport` sends a :class:`~imprint.runtime.writer.Record` with
  aiokafka's idempotent producer (``enable_idempotence=True``, ``acks="all"``): the
  broker drops the producer's own retries, so a record is written once per send, in
  order per partition; the writer's deterministic ``event_id`` covers the rest (a
  retried *call*).
* :class:`KafkaDecisions` reads ``imprint.publication.v1`` from its end and feeds
  :class:`~imprint.runtime.decisions.Decisions`, so a caller learns the block ids the
  Host issued for its proposals. Start it before sending what it should answer.
* :class:`KafkaControl` reads ``imprint.control.v1`` from its end and feeds
  :class:`~imprint.runtime.stopping.StopRequests` (X11), so a user's stop request reaches
  the :func:`~imprint.runtime.stopping.run_scope` of its run. Start it before the runs it
  should stop. It keeps the questions steered into a run too (``run.steered``, X12).
* :class:`KafkaTurns` reads ``imprint.runs.v1``'s conversation facts from its end and feeds
  :class:`~imprint.runtime.turns.Turns`, so a run waits for its turn in its conversation (X12).

Both read every partition of their topic without a consumer group, from its end when
started: what a process needs is what happens to its own runs from then on.

``topic_prefix`` is prepended to contract topic names, as ``IMPRINT_TOPIC_PREFIX`` does
for the services.

Tracing: each send is a PRODUCER span (``send <topic>``, the record's ids as attributes,
never its value) whose W3C ``traceparent`` goes out in the record's headers, so the parts
that handle the message continue its trace (:mod:`imprint.runtime.tracecontext`). The spans
go to the application's OpenTelemetry SDK (``tracer_provider``, default the global one);
with none configured they are no-ops and the headers stay as the writer built them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.conversation import CONVERSATION_FACTS, RunSteered
from imprint.contracts.registry import decode
from imprint.contracts.runs import ConversationDeleted
from imprint.contracts.topics import Topic
from imprint.runtime import tracecontext
from imprint.runtime.decisions import Decisions
from imprint.runtime.stopping import StopRequests
from imprint.runtime.turns import Turns
from imprint.runtime.writer import Record

log = logging.getLogger(__name__)


class _Started:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()


class KafkaTransport(_Started):
    def __init__(self, bootstrap_servers: str, *, topic_prefix: str = "", client_id: str = "imprint-runtime",
                 tracer_provider: trace.TracerProvider | None = None, **producer_options: Any) -> None:
        self._prefix = topic_prefix
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, client_id=client_id,
                                          enable_idempotence=True, acks="all", **producer_options)
        self._tracer = trace.get_tracer("imprint.runtime", tracer_provider=tracer_provider)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, record: Record) -> None:
        topic = f"{self._prefix}{record.topic}"
        with tracecontext.span(self._tracer, f"send {topic}", kind=SpanKind.PRODUCER,
                               messaging={"messaging.system": "kafka", "messaging.operation.type": "send",
                                          "messaging.destination.name": topic},
                               **dict(record.ids)):
            await self._producer.send_and_wait(topic, record.value, key=record.key,
                                               headers=tracecontext.inject(record.headers))


class _TopicReader(_Started):
    """Reads one topic from its end (every partition, no group) in a background task and
    hands :meth:`_take` each record."""

    def __init__(self, topic: Topic, bootstrap_servers: str, *, topic_prefix: str, client_id: str) -> None:
        self._contract_topic = topic
        self._topic = f"{topic_prefix}{topic}"
        self._consumer = AIOKafkaConsumer(self._topic, bootstrap_servers=bootstrap_servers, client_id=client_id,
                                          group_id=None, enable_auto_commit=False, auto_offset_reset="latest")
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Position at the topic's current end (every partition), then read in the background."""
        await self._consumer.start()  # without a group, every partition of the topic is assigned here
        partitions = sorted(self._consumer.assignment())
        await self._consumer.seek_to_end(*partitions)
        for partition in partitions:  # resolve the positions now: nothing sent after start() is missed
            await self._consumer.position(partition)
        self._task = asyncio.create_task(self._read(), name=f"imprint-runtime-{self._contract_topic}")
        self._task.add_done_callback(_report_failure)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was reported already
                await self._task
            self._task = None
        await self._consumer.stop()

    async def _read(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    self._take(record)

    def _take(self, record: Any) -> None: ...

    def _observe_typed(self, record: Any, types: frozenset[str]) -> None:
        """Hand :meth:`observe` the record's message if its ``type`` header is one of ``types``
        (any other is skipped undecoded)."""
        kind = next((value for key, value in record.headers or () if key == "type"), None)
        if kind is not None and kind.decode("utf-8", "replace") not in types:
            return
        message = self._decode(record)
        if message is not None:
            self.observe(message)  # type: ignore[attr-defined]  # the reader's other base

    def _decode(self, record: Any) -> Any | None:
        try:
            return decode(self._contract_topic, record.value or b"")
        except (ValidationError, ValueError):
            log.warning("undecodable %s record skipped at offset %s", self._contract_topic, record.offset)
            return None


class KafkaDecisions(Decisions, _TopicReader):
    def __init__(self, bootstrap_servers: str, *, topic_prefix: str = "", client_id: str = "imprint-runtime") -> None:
        Decisions.__init__(self)
        _TopicReader.__init__(self, Topic.PUBLICATION, bootstrap_servers, topic_prefix=topic_prefix,
                              client_id=client_id)

    def _take(self, record: Any) -> None:
        """Feed every awaited run's publication messages to :meth:`observe` (key = run_id)."""
        if record.key is not None and not self.awaits(record.key.decode("utf-8", "replace")):
            return  # another run's message: nobody here waits for it
        message = self._decode(record)
        if message is not None:
            self.observe(message)


STOP_TYPES = frozenset({RunCancelRequested.model_fields["type"].default, RunSteered.model_fields["type"].default})
"""The control messages a runtime acts on (a stop, X11, and a steered question, X12); the rest of the
topic (deletions, lease lapses, users' queue requests) is skipped by its ``type`` header, undecoded."""


class KafkaControl(StopRequests, _TopicReader):
    """X11: a user's stop requests, from ``imprint.control.v1``, for the scopes of this
    process's runs (:func:`~imprint.runtime.stopping.run_scope`)."""

    def __init__(self, bootstrap_servers: str, *, topic_prefix: str = "", client_id: str = "imprint-runtime") -> None:
        StopRequests.__init__(self)
        _TopicReader.__init__(self, Topic.CONTROL, bootstrap_servers, topic_prefix=topic_prefix,
                              client_id=client_id)

    def _take(self, record: Any) -> None:
        self._observe_typed(record, STOP_TYPES)


TURN_TYPES = frozenset(fact.model_fields["type"].default for fact in (*CONVERSATION_FACTS, ConversationDeleted))
"""X12: the conversation facts of ``imprint.runs.v1`` (and a deletion, X8); the runs' own messages are
skipped undecoded."""


class KafkaTurns(Turns, _TopicReader):
    """X12: the conversations' facts, from ``imprint.runs.v1``, for the runs of this process that
    wait for their turn (:meth:`~imprint.runtime.writer.RunWriter.start` with ``turns``). Start it
    before admitting those runs."""

    def __init__(self, bootstrap_servers: str, *, topic_prefix: str = "", client_id: str = "imprint-runtime") -> None:
        Turns.__init__(self)
        _TopicReader.__init__(self, Topic.RUNS, bootstrap_servers, topic_prefix=topic_prefix, client_id=client_id)

    def _take(self, record: Any) -> None:
        self._observe_typed(record, TURN_TYPES)


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped: waits for decisions time out, stop requests are not heard", task.get_name(),
                  exc_info=task.exception())

"""Kafka plumbing shared by the services, on FastStream (aiokafka underneath).

* :class:`Outbox` publishes contract messages: key = run_id (sources: source_id),
  header ``type``, aiokafka's idempotent producer (acks=all). One mechanism for every
  send: a part's previews, events and dead letters, and the relays' announcements.
* :func:`subscribe_tracked` registers a batch subscriber with MANUAL
  acknowledgement. FastStream's default policy acknowledges whatever the handler
  does (at most once); here the offset is committed only after the store has
  committed the batch together with its eventsourcing tracking records, so a
  redelivery is recognised by the store and never applied twice.
* Anything that cannot be decoded against the topic's v1 union goes to
  ``imprint.deadletter.v1`` with the reason and the original bytes; the consumer
  keeps running. A message of a newer minor version is not such a thing: its unknown
  fields are ignored and recorded (R8, :mod:`services.common.evolution`), the message applied.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import logging
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import chain
from typing import Any

import psycopg
from aiokafka import ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError
from eventsourcing.persistence import PersistenceError
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy
from opentelemetry import trace as otel_trace
from opentelemetry.context import Context
from pydantic import ValidationError

from imprint.contracts.base import Message
from imprint.contracts.deadletter import ORIGINAL_CAP_BYTES, DeadLetter
from imprint.contracts.registry import TOPIC_OF_TYPE, TRANSPORT_CAP_BYTES, decode_noting_unknown, encode
from imprint.contracts.topics import Topic
from imprint.runtime import tracecontext
from services.common import tracing
from services.common.evolution import record_unknown_fields
from services.common.observability import get_logger
from services.common.settings import Settings
from services.common.inbound import Inbound

log = get_logger(__name__)

DEADLETTER_NAMESPACE = uuid.UUID("6f1d4b7e-3d0b-4c55-9f55-2d8f5c1e0a01")


def bootstrap_hosts(settings: Settings) -> list[str]:
    """``host:port,host:port`` (a cluster) as a list: FastStream hands a plain string on as
    ONE host, and every client of a part takes the same list."""
    return [host.strip() for host in settings.kafka_bootstrap.split(",") if host.strip()]


def make_broker(settings: Settings, client_id: str) -> KafkaBroker:
    return KafkaBroker(
        bootstrap_hosts(settings),
        client_id=client_id,
        # The broker subscribes; nothing of a part is sent through it (see Outbox).
        # Handlers take the poll itself (see _the_poll), so FastStream's per-call dependency
        # injection (fast_depends: a signature solved and validated on every poll) is off.
        apply_types=False,
        # FastStream's own logger stays on (WARNING and up, see observability): framework
        # failures around a poll must be visible, never swallowed.
        logger=logging.getLogger("faststream"),
    )


def contract_topic(settings: Settings, name: str) -> Topic:
    """The contract topic of a (possibly prefixed) Kafka topic name."""
    return Topic(name.removeprefix(settings.topic_prefix))


Outgoing = tuple[Topic, Message] | tuple[Topic, Message, Context | None]
"""What the outbox sends: a topic and a message, and optionally the trace context it continues."""


class Outbox:
    """Publishes contract messages to their topics, with its own aiokafka producer:
    idempotent (``acks=all``), with a linger so the sends of a poll or a relay batch fill
    large produce requests. Every message is keyed by its ``key`` (run_id; sources:
    source_id) and carries a ``type`` header; per-partition order is the send order.
    ``start`` before the first send, ``stop`` after the last.

    FastStream still subscribes (:func:`subscribe_tracked`); sends go straight to aiokafka:
    ``KafkaBroker.publish`` adds its own middleware and serialization to every send, and a
    proposal's previews are sent on the hot path."""

    def __init__(self, settings: Settings, client_id: str, *, linger_ms: int = 2,
                 tracer: otel_trace.Tracer | None = None) -> None:
        """``tracer`` (``services.common.tracing.active_tracer``; ``None``: tracing off): a
        message sent with a trace context gets a PRODUCER span of its own under it, ended
        when the broker answers, and carries that span's ``traceparent``."""
        self._settings = settings
        self._client_id = client_id
        self._linger_ms = linger_ms
        self._tracer = tracer
        self._producer: Any = None
        """Made by :meth:`start`: aiokafka binds a producer to the event loop it is made on."""

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_hosts(self._settings),
            client_id=self._client_id,
            acks="all",  # every in-sync replica (min.insync.replicas=2 on a 3-broker cluster)
            enable_idempotence=True,  # a retried send is written once per partition
            linger_ms=self._linger_ms, max_batch_size=512 * 1024, max_request_size=2 * 1024 * 1024,
        )
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def publish(self, topic: Topic, message: Message, trace: Context | None = None) -> None:
        await confirmed(await self.send_many([(topic, message, trace)]))

    async def publish_many(self, items: Iterable[Outgoing]) -> None:
        """Send in order, confirm together: one round of acknowledgements per batch."""
        await confirmed(await self.send_many(items))

    async def send_many(self, items: Iterable[Outgoing]) -> list[asyncio.Future[Any]]:
        """Send in order now; the broker's acknowledgements are the returned futures, for a
        caller with something better to do than wait for them (:func:`confirmed`).

        An item may carry a trace context third (:data:`Outgoing`): its ``traceparent`` goes
        out in the record's headers, so the consumer's span continues that trace."""
        if self._producer is None:
            raise RuntimeError(f"outbox {self._client_id} sends before it was started")
        send, topic_name = self._producer.send, self._settings.topic
        futures = []
        for item in items:
            topic, message = item[0], item[1]
            headers = [("type", message.type.encode())]
            if len(item) > 2 and item[2] is not None:
                if self._tracer is not None:
                    futures.append(await self._send_traced(topic_name(topic), message, headers, item[2]))
                    continue
                headers = tracecontext.inject(headers, item[2])
            futures.append(await send(topic_name(topic), encode(message), key=message.key.encode(), headers=headers))
        return futures

    async def _send_traced(self, topic: str, message: Message, headers: list[tuple[str, bytes]],
                           parent: Context) -> asyncio.Future[Any]:
        assert self._tracer is not None
        span = tracing.sending(self._tracer, topic, message, parent, self._client_id)
        try:
            future: asyncio.Future[Any] = await self._producer.send(
                topic, encode(message), key=message.key.encode(),
                headers=tracecontext.inject(headers, otel_trace.set_span_in_context(span, parent)))
        except BaseException as error:
            tracing.sent(span, error)
            raise
        future.add_done_callback(lambda done: tracing.sent(
            span, None if done.cancelled() else done.exception()))
        return future


async def confirmed(acknowledgements: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every acknowledgement; the first failure is raised (the others still settle)."""
    if acknowledgements:
        await asyncio.gather(*acknowledgements)


def decode_records(
    settings: Settings, consumer: str, records: Sequence[ConsumerRecord[Any, Any]],
    applies: frozenset[str] | None = None,
) -> tuple[list[Inbound], list[DeadLetter]]:
    """Split a poll into decoded messages and typed refusals (with the original bytes).
    A message with fields of a newer minor version is decoded without them, and they are
    recorded (R8).

    ``applies``: the message types this consumer acts on. A record whose ``type`` header
    (which repeats the body's type, SPEC §2) names another type *of its topic* is left out
    undecoded: it would change nothing here, and decoding it (bodies included) was most
    of the Journal's CPU. A record with no such header, or an unknown type, is decoded as
    ever, and refused if it does not decode."""
    inbound: list[Inbound] = []
    refused: list[DeadLetter] = []
    for record in records:
        if applies is not None and _not_applied(settings, record, applies):
            continue
        raw: bytes = record.value or b""
        reason: str | None = None
        detail = ""
        message: Any = None
        if len(raw) > TRANSPORT_CAP_BYTES:
            reason, detail = "oversized", f"{len(raw)} bytes over the {TRANSPORT_CAP_BYTES} byte transport cap"
        else:
            try:
                decoded = decode_noting_unknown(contract_topic(settings, record.topic), raw)
                message = decoded.message
                if decoded.unknown_fields:
                    record_unknown_fields(consumer, record.topic, message.type, decoded.unknown_fields)
            except ValidationError as error:
                first = error.errors()[0] if error.errors() else {}
                if first.get("type") in {"json_invalid", "json_type"}:
                    reason = "unparseable"
                elif first.get("type") == "union_tag_invalid":
                    reason = "unknown_type"
                else:
                    reason = "schema_invalid"
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in error.errors()[:5]
                )[:2000]
            except (UnicodeDecodeError, ValueError) as error:
                reason, detail = "unparseable", str(error)[:2000]
        if reason is None:
            inbound.append(Inbound(record.topic, record.partition, record.offset, message, size=len(raw),
                                   raw=raw, key=record.key, trace=tracecontext.extract(record.headers)))
            continue
        refused.append(dead_letter(consumer, record.topic, record.partition, record.offset, record.key, raw,
                                   reason, detail))
    return inbound, refused


def _not_applied(settings: Settings, record: ConsumerRecord[Any, Any], applies: frozenset[str]) -> bool:
    for key, value in record.headers or ():
        if key == "type":
            kind = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return kind not in applies and TOPIC_OF_TYPE.get(kind) == contract_topic(settings, record.topic)
    return False


def dead_letter(
    consumer: str, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes, reason: str, detail: str
) -> DeadLetter:
    """A typed refusal carrying the original bytes; its event_id is fixed by the position, so a
    redelivered refusal is the same dead letter."""
    log.warning("message refused", consumer=consumer, topic=topic, partition=partition, offset=offset, reason=reason)
    kept = raw[:ORIGINAL_CAP_BYTES]
    return DeadLetter(
        event_id=uuid.uuid5(DEADLETTER_NAMESPACE, f"{consumer}|{topic}|{partition}|{offset}"),
        reason=reason,  # type: ignore[arg-type]
        detail=detail[:2000],
        consumer=consumer,
        topic=topic,
        partition=partition,
        offset=offset,
        key_b64=base64.b64encode(key).decode() if key else None,
        original_b64=base64.b64encode(kept).decode(),
        original_size=len(raw),
        original_sha256=hashlib.sha256(raw).hexdigest(),
        original_truncated=len(kept) < len(raw),
    )


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    PersistenceError,  # eventsourcing's wrapper of every recorder failure
    psycopg.OperationalError,  # raw psycopg, e.g. the key store and the delivery view store
    psycopg.InterfaceError,
    sqlite3.OperationalError,  # "database is locked" and friends
    OSError,
    TimeoutError,
    KafkaError,
)
"""Failures worth retrying the same batch for: the database or the broker, not the message."""


async def _handle_isolating_poison(
    handle: BatchHandler, inbound: list[Inbound], consumer: str
) -> list[DeadLetter]:
    """Apply the batch; if it fails for a non-transient reason, apply its messages one by
    one and set aside (dead-letter) only those that fail on their own."""
    try:
        await handle(inbound)
        return []
    except TRANSIENT_ERRORS:
        raise
    except Exception:
        if len(inbound) == 1:
            item = inbound[0]
            log.exception("message could not be applied; dead-lettering it", consumer=consumer,
                          topic=item.topic, partition=item.partition, offset=item.offset)
            return [dead_letter(consumer, item.topic, item.partition, item.offset, item.key, item.raw,
                                "processing_error", "applying the message raised a non-transient error")]
    letters: list[DeadLetter] = []
    for item in inbound:
        letters.extend(await _handle_isolating_poison(handle, [item], consumer))
    return letters


BatchHandler = Callable[[list[Inbound]], Awaitable[None]]

IDLE_POLL_MS = 10
"""The bench's bare consumer floor polls with this timeout (``bench.floors``). A tracked
consumer's poll does not time out to poll again (:class:`Polls`): it waits for records."""


FETCH_WAIT_MS = 20
"""The longest the broker holds a fetch of a consumer on the latency path (Publication,
Delivery) while some of its partitions are left out of that fetch. aiokafka keeps one
fetch in flight per broker and leaves out of it every partition whose fetched records are
still unconsumed; once a poll takes longer than its prefetch backoff (100 ms), the next
fetch can hold only quiet partitions (the sources and control topics), and the broker kept
it for Kafka's default 500 ms while records waited on the busy ones: under load, a stall of
up to half a second after every long poll, and a longer poll after it. A fetch that
carries every partition is a long poll instead (:data:`LONG_POLL_MS`)."""


LONG_POLL_MS = 1000
"""How long the broker holds a fetch that carries every partition of a consumer with
nothing left to consume (Kafka's ``fetch.max.wait.ms``, with a ``fetch.min.bytes`` of 1):
a record arriving on any of them answers it at once, so the wait costs no latency, and a
consumer with nothing to do sends one request per this long instead of one per
:data:`FETCH_WAIT_MS`. Not longer: the broker answers one request of a connection at a
time, so a metadata request, and the fetch that re-reads a rewound (nacked) batch, wait
behind the long poll; a rewound batch waits its retry pause (a second) anyway."""


QUIET_SECONDS = 1.0
"""A gathering consumer (``gather_ms``) that has polled no record for this long long-polls
(:data:`LONG_POLL_MS`, answered by the first record) instead of gathering: the first
record after a quiet spell is not held for a gathering window, and a quiet consumer does
not send an empty fetch every ``gather_ms``. A busy one, even at a paced load, gathers."""


GATHER_BYTES = 1024 * 1024
"""The ``fetch.min.bytes`` of a gathering consumer: more than a fetch of one wait's records
usually holds, so the wait, not the size, ends the fetch (a backlog still fills it at once)."""


def offsets_after(records: Sequence[ConsumerRecord]) -> dict[TopicPartition, int]:
    """The offsets to commit once ``records`` are applied: per partition, the one after the
    last record of the batch. Not the consumer's position: the next poll may already have
    moved that past records nobody applied yet."""
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        partition = TopicPartition(record.topic, record.partition)
        offsets[partition] = max(offsets.get(partition, 0), record.offset + 1)
    return offsets


class OffsetCommits:
    """The Kafka offsets of applied batches, committed at most every ``interval`` seconds,
    and once more ``interval`` after the last batch of a busy spell.

    The store's tracking records are the truth about what was applied; a committed offset
    only shortens what a restart or a rebalance redelivers (and the store skips that
    redelivery). So committing after every poll — a broker request and a write to
    ``__consumer_offsets`` per poll, for polls of one message under a paced load — buys
    nothing. At most one commit is in flight, and a commit always carries the offsets
    *after* batches that were applied, never the consumer's position: the next poll may
    already have moved that past records nobody applied yet."""

    def __init__(self, consumer: str, interval: float) -> None:
        self._name = consumer
        self._interval = interval
        self._pending: dict[TopicPartition, int] = {}
        self._client: Any = None
        self._in_flight: asyncio.Task[None] | None = None
        self._trailing: asyncio.TimerHandle | None = None
        self._last = -interval

    def applied(self, client: Any, records: Sequence[ConsumerRecord[Any, Any]]) -> None:
        """``records`` are recorded by the store: their offsets may be committed."""
        self._client = client
        for partition, offset in offsets_after(records).items():
            self._pending[partition] = max(self._pending.get(partition, 0), offset)
        if self._in_flight is None and asyncio.get_running_loop().time() >= self._last + self._interval:
            self._start()
        else:
            self._schedule()

    async def settle(self) -> None:
        """Wait for the commit in flight, if any (before a batch is rewound)."""
        if self._in_flight is not None:
            await asyncio.gather(self._in_flight, return_exceptions=True)

    async def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        """Commit what is pending for partitions about to go to another member, while this
        member's generation may still commit them."""
        lost = {partition: self._pending.pop(partition) for partition in partitions if partition in self._pending}
        await self.settle()
        if lost and self._client is not None:
            await self._commit(lost)

    def _on_timer(self) -> None:
        self._trailing = None
        if self._pending and self._in_flight is None:
            self._start()

    def _start(self) -> None:
        offsets, self._pending = self._pending, {}
        self._last = asyncio.get_running_loop().time()
        self._in_flight = asyncio.ensure_future(self._commit(offsets))
        self._in_flight.add_done_callback(self._done)

    def _done(self, _: asyncio.Task[None]) -> None:
        self._in_flight = None
        if self._pending:
            self._schedule()

    def _schedule(self) -> None:
        """A commit of what is pending once the interval since the last one has passed."""
        if self._trailing is None:
            loop = asyncio.get_running_loop()
            self._trailing = loop.call_later(max(self._last + self._interval - loop.time(), 0.0), self._on_timer)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self._client.commit(offsets)
        except Exception:  # noqa: BLE001 — a lost offset commit only means a redelivery the store skips
            log.warning("offset commit failed; the next one covers it", consumer=self._name)


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance hook, reduced to what a tracked consumer needs to hear."""

    def __init__(self, commits: OffsetCommits, on_revoked: Callable[[list[str]], Awaitable[None]] | None,
                 on_assigned: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
        self._commits = commits
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._commits.revoked(revoked)
        names = [f"{tp.topic}#{tp.partition}" for tp in revoked]
        if names:
            log.info("partitions revoked", partitions=names)
            if self._on_revoked is not None:
                await self._on_revoked(names)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned:
            names = [f"{tp.topic}#{tp.partition}" for tp in assigned]
            log.info("partitions assigned", partitions=names)
            if self._on_assigned is not None:
                await self._on_assigned(names)


async def _the_poll(message: Any) -> Any:
    """FastStream decoder: hand the handler the poll itself (its records, its consumer,
    its ``nack``), undecoded. Decoding is intake's job, where a failure becomes a dead
    letter; FastStream's own JSON decoding would fail the whole poll before the handler
    ran (e.g. RecursionError on deep nesting). With the broker's ``apply_types`` off, what
    the decoder returns is what the handler is called with: no dependency injection per
    poll (a signature solved and validated on every call).

    FastStream keeps what its decoder returned in the message's decode cache, here the
    message itself: a reference cycle that held every poll (its records, their keys,
    values and headers) until the cyclic collector found it — thousands of objects per
    young collection, tens of milliseconds each. The handler clears that cache first
    (``clear_cache``), so a poll is freed as soon as it is handled."""
    return message


async def _tolerant_parser(records: Any, original: Callable[[Any], Awaitable[Any]]) -> Any:
    """FastStream parser: header values that are not UTF-8 must not sink the poll
    (the value is still dead-lettered or processed on its own merits)."""
    try:
        return await original(records)
    except UnicodeDecodeError:
        batch = records if isinstance(records, tuple) else (records,)
        safe = tuple(dataclasses.replace(r, headers=[(k, v.decode("utf-8", "replace").encode()) for k, v in r.headers])
                     for r in batch)
        return await original(safe if isinstance(records, tuple) else safe[0])


POLL_WAIT_MS = 60_000
"""How long one poll of a tracked consumer waits for records before it polls again: it
returns as soon as a fetch brought any, so this only bounds an idle loop's turns."""


class Polls:
    """How a tracked consumer waits for records, decided in one place for every poll and
    every fetch.

    * A poll waits until records arrive (:data:`POLL_WAIT_MS`). FastStream's batch
      subscriber polls with its ``batch_timeout_ms`` and, after an empty poll, *sleeps*
      that long before the next: a bound short enough not to delay the first record
      woke every quiet consumer a hundred times a second. It is this subscriber's
      ``get_msg`` (the one call its consume loop makes per poll).
    * A fetch that carries every partition — nothing fetched is left to consume, and a
      gathering consumer has been quiet for :data:`QUIET_SECONDS` — is a long poll
      (:data:`LONG_POLL_MS`, ``fetch.min.bytes`` 1): the broker answers it with the
      first record. Any other fetch keeps the busy bounds (``busy_wait_ms`` and
      ``busy_min_bytes``: :data:`FETCH_WAIT_MS`, or a gathering window). aiokafka's
      fetcher reads both settings each time it builds a fetch request; they are set
      just before it does.

    ``fetches`` and ``long_polls`` count the fetch requests sent, for tests."""

    def __init__(self, max_records: int, *, busy_wait_ms: int, busy_min_bytes: int = 1, gathers: bool = False,
                 long_poll_ms: int = LONG_POLL_MS) -> None:
        self._max_records = max_records
        self._busy = (busy_wait_ms, busy_min_bytes)
        self._gathers = gathers
        self._long = (long_poll_ms, 1)
        self._consumer: Any = None
        self._polled_at = -QUIET_SECONDS
        self.fetches = 0
        self.long_polls = 0
        self.long_polling = False
        """The last fetch sent was a long poll (it is in flight until records or the wait end it)."""

    async def get_msg(self, consumer: Any) -> tuple[ConsumerRecord[Any, Any], ...]:
        if consumer is not self._consumer:
            self._plan_fetches(consumer)
        polled = await consumer.getmany(timeout_ms=POLL_WAIT_MS, max_records=self._max_records)
        if not polled:
            return ()
        self._polled_at = time.monotonic()
        return tuple(chain.from_iterable(polled.values()))

    def _plan_fetches(self, consumer: Any) -> None:
        self._consumer = consumer
        fetcher = consumer._fetcher  # built by the consumer's start, before its first poll
        plan = fetcher._get_actions_per_node

        def actions(assignment: Any) -> Any:
            quiet = not fetcher._records and (
                not self._gathers or time.monotonic() - self._polled_at >= QUIET_SECONDS)
            fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes = self._long if quiet else self._busy
            planned = plan(assignment)
            if planned[0]:
                self.fetches += len(planned[0])
                self.long_polls += len(planned[0]) if quiet else 0
                self.long_polling = quiet
            return planned

        fetcher._get_actions_per_node = actions


def subscribe_tracked(
    broker: KafkaBroker,
    settings: Settings,
    outbox: Outbox,
    *,
    consumer: str,
    topics: Sequence[Topic],
    handle: BatchHandler,
    max_records: int = 500,
    retry_seconds: float = 1.0,
    on_revoked: Callable[[list[str]], Awaitable[None]] | None = None,
    applies: frozenset[str] | None = None,
    gather_ms: int = 0,
    on_assigned: Callable[[list[str]], Awaitable[None]] | None = None,
    observe: Callable[[Sequence[ConsumerRecord[Any, Any]]], None] | None = None,
    long_poll_ms: int = LONG_POLL_MS,
) -> Polls:
    """Register ``handle`` for batches from ``topics`` with manual acknowledgement.

    ``handle`` must commit its effects together with each message's tracking record
    (``Inbound.tracking``). It is called only with valid messages; refusals are
    dead-lettered first. On failure the batch is rewound (nack) and retried.

    ``on_revoked`` hears the tracking names (``<topic>#<partition>``) of partitions this
    instance just lost to another member of the group, before they are reassigned: the
    store drops what it cached for them and reloads from the log if they come back.

    ``on_assigned`` hears the tracking names of the partitions this instance was just given.

    ``applies`` names the message types the consumer acts on; the others are acknowledged
    undecoded (see :func:`decode_records`). ``observe`` sees every record of each poll,
    decoded or not, before the poll is applied (the Journal renews run leases from it, X10).

    ``gather_ms`` lets the broker hold each fetch that long to gather records (Kafka's
    ``fetch.max.wait.ms``, with a ``fetch.min.bytes`` of :data:`GATHER_BYTES`). Without it a
    fetch returns as soon as any one record arrived, so at a steady load a consumer of many
    partitions turns a fetch round trip (encoded, sent and parsed in Python) for every few
    records. For a consumer nobody waits on per message, ``gather_ms`` of delay buys
    fetches and polls several times larger; a quiet one long-polls (:class:`Polls`).

    Returns the consumer's :class:`Polls` (how it waits; its fetch counts).
    """

    commits = OffsetCommits(consumer, settings.offset_commit_seconds)
    polls = Polls(max_records, busy_wait_ms=gather_ms or FETCH_WAIT_MS,
                  busy_min_bytes=GATHER_BYTES if gather_ms else 1, gathers=bool(gather_ms), long_poll_ms=long_poll_ms)

    subscriber = broker.subscriber(
        *(settings.topic(t) for t in topics),
        group_id=f"{settings.group_prefix}.{consumer}",
        batch=True,
        max_records=max_records,
        batch_timeout_ms=IDLE_POLL_MS,
        **({"fetch_max_wait_ms": gather_ms, "fetch_min_bytes": GATHER_BYTES} if gather_ms
           else {"fetch_max_wait_ms": FETCH_WAIT_MS}),
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.MANUAL,
        listener=_Revocations(commits, on_revoked, on_assigned),
        decoder=_the_poll,
        parser=_tolerant_parser,
    )
    subscriber.get_msg = polls.get_msg  # type: ignore[method-assign]  # FastStream's loop calls it per poll

    @subscriber
    async def on_batch(msg: KafkaMessage) -> None:
        msg.clear_cache()  # see _the_poll: the poll is no longer its own decoded body
        records = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
        try:
            if observe is not None:
                observe(records)
            inbound, refused = decode_records(settings, consumer, records, applies)
            if refused:
                await outbox.publish_many((Topic.DEADLETTER, letter) for letter in refused)
            if inbound:
                poisoned = await _handle_isolating_poison(handle, inbound, consumer)
                if poisoned:
                    await outbox.publish_many((Topic.DEADLETTER, letter) for letter in poisoned)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch failed; rewinding for redelivery", consumer=consumer, records=len(records))
            await commits.settle()
            await msg.nack()
            await asyncio.sleep(retry_seconds)
            return
        # The next poll need not wait for the offset commit (see OffsetCommits): it commits
        # this batch's offsets, never the consumer's position (FastStream's ``ack`` commits
        # the position, which is right only when nothing polls meanwhile).
        commits.applied(msg.consumer, records)

    return polls

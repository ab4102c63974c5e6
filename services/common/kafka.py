"""Kafka plumbing shared by the services, on FastStream (aiokafka underneath).

* :class:`Outbox` publishes contract messages: key = run_id (sources: source_id),
  header ``type``, aiokafka's idempotent producer (acks=all). One mechanism for every
  send: a part's previews, events and dead letters, and the relays' announcements.
* :mod:`services.common.subscription` registers the tracked batch subscribers that
  consume through what is here (how they poll, commit offsets and isolate a poison message).
* Anything that cannot be decoded against the topic's v1 union goes to
  ``imprint.deadletter.v1`` with the reason and the original bytes; the consumer
  keeps running. A message of a newer minor version is not such a thing: its unknown
  fields are ignored and recorded (R8, :mod:`services.common.evolution`), the message applied.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import psycopg
from aiokafka import ConsumerRecord
from aiokafka.errors import KafkaError
from eventsourcing.persistence import DataError, PersistenceError
from faststream.kafka import KafkaBroker
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
                                   raw=raw, key=record.key, trace=_trace_of(record.headers)))
            continue
        refused.append(dead_letter(consumer, record.topic, record.partition, record.offset, record.key, raw,
                                   reason, detail))
    return inbound, refused


def _trace_of(headers: Sequence[tuple[str, bytes]] | None) -> Context | None:
    """The remote parent a record's ``traceparent`` names; a record sent untraced carries
    none (its sender adds the header only for a span it has open), and is not handed to
    the propagator at all."""
    if not any(key == tracecontext.TRACEPARENT for key, _ in headers or ()):
        return None
    return tracecontext.extract(headers)


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


BatchHandler = Callable[[list[Inbound]], Awaitable[None]]
"""What a consumer does with a poll's valid messages: commits their effects with their tracking records."""

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

DATA_ERRORS: tuple[type[BaseException], ...] = (DataError, psycopg.DataError)
"""The database refusing a message's own values (DB-API's ``DataError``: e.g. a NUL character,
which PostgreSQL's text columns cannot hold, in an id a message names). eventsourcing wraps it
as a :class:`PersistenceError` like a lost connection, but a retry fails the same way: it is
the message's failure, isolated and dead-lettered, not a reason to stall the partition."""


async def apply_isolating_poison(
    handle: BatchHandler, inbound: list[Inbound], consumer: str
) -> list[DeadLetter]:
    """Apply the batch; if it fails for a non-transient reason, apply its messages one by
    one and set aside (dead-letter) only those that fail on their own."""
    try:
        await handle(inbound)
        return []
    except Exception as error:
        if isinstance(error, TRANSIENT_ERRORS) and not isinstance(error, DATA_ERRORS):
            raise
        if len(inbound) == 1:
            item = inbound[0]
            log.exception("message could not be applied; dead-lettering it", consumer=consumer,
                          topic=item.topic, partition=item.partition, offset=item.offset)
            return [dead_letter(consumer, item.topic, item.partition, item.offset, item.key, item.raw,
                                "processing_error", "applying the message raised a non-transient error")]
    letters: list[DeadLetter] = []
    for item in inbound:
        letters.extend(await apply_isolating_poison(handle, [item], consumer))
    return letters

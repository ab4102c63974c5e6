"""The tracked subscription every consumer runs on: :func:`subscribe_tracked` registers a
FastStream batch subscriber with MANUAL acknowledgement. FastStream's default policy
acknowledges whatever the handler does (at most once); here the offset is committed only
after the store has committed the batch together with its eventsourcing tracking records,
so a redelivery is recognised by the store and never applied twice.

How a subscriber polls (:class:`Polls`: it waits for records and never sleeps; a quiet one
long-polls), commits offsets (:class:`OffsetCommits`: applied batches, not the position, at
most every ``IMPRINT_OFFSET_COMMIT_SECONDS``) and isolates a message its handler cannot apply
(a dead letter, the rest of the poll applied) is said here; what a record decodes to, how a
refusal becomes a dead letter and how messages are sent is :mod:`services.common.kafka`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import chain
from typing import Any, TypeVar

from aiokafka import ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy

from imprint.contracts.topics import Topic
from services.common.observability import get_logger
from services.common.settings import Settings
from services.common.kafka import BatchHandler, Outbox, apply_isolating_poison, decode_records

log = get_logger(__name__)


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


GATHER_FROM = 1
"""The fewest records of a gathering consumer's poll after which its next fetch gathers
(:class:`Polls`); one on the latency path raises it (Delivery's ``GATHER_FROM``)."""


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
    * Each fetch is one of three kinds (aiokafka's fetcher reads both settings each time
      it builds a fetch request; they are set just before it does). **Behind** — fetched
      records wait to be consumed, so their partitions are left out: the busy bounds,
      :data:`FETCH_WAIT_MS` or a gathering consumer's window. **Gathering** — a consumer
      given ``gather_ms`` whose last poll brought at least ``gather_from`` records, and
      whose last window was not answered empty: the broker holds the fetch for the window
      (``fetch.min.bytes`` :data:`GATHER_BYTES`), so a busy consumer polls fewer, larger
      batches. **Long poll** otherwise: every partition, held for :data:`LONG_POLL_MS`
      (``fetch.min.bytes`` 1) and answered by the first record. A consumer at a paced load,
      whose polls bring a record or two, hands each on as it arrives (a window there is a
      fixed delay, not a batch), and one whose load stopped sends no empty fetch per window.

    ``fetches``, ``long_polls`` and ``gathered`` count the fetch requests sent, for tests."""

    def __init__(self, max_records: int, *, gather_ms: int = 0, gather_from: int = GATHER_FROM,
                 long_poll_ms: int = LONG_POLL_MS) -> None:
        self._max_records = max_records
        self._gather = (gather_ms, GATHER_BYTES) if gather_ms else None
        self._gather_from = gather_from
        self._behind = self._gather or (FETCH_WAIT_MS, 1)
        self._long = (long_poll_ms, 1)
        self._consumer: Any = None
        self._polls, self._last_poll = 0, 0  # polls taken; records the last one brought
        self._gathering_after = -1  # polls taken when the last gathering fetch was sent
        self.fetches, self.long_polls, self.gathered = 0, 0, 0
        self.long_polling = False
        """The last fetch sent was a long poll (it is in flight until records or the wait end it)."""

    async def get_msg(self, consumer: Any) -> tuple[ConsumerRecord[Any, Any], ...]:
        if consumer is not self._consumer:
            self._plan_fetches(consumer)
        polled = await consumer.getmany(timeout_ms=POLL_WAIT_MS, max_records=self._max_records)
        if not polled:
            return ()
        records = tuple(chain.from_iterable(polled.values()))
        self._polls += 1
        self._last_poll = len(records)
        return records

    def bounds(self, behind: bool) -> tuple[int, int]:
        """``(fetch.max.wait.ms, fetch.min.bytes)`` of the next fetch (``behind``: see above)."""
        if behind:
            return self._behind
        if (self._gather is not None and self._last_poll >= self._gather_from
                and self._polls != self._gathering_after):
            return self._gather
        return self._long

    def _plan_fetches(self, consumer: Any) -> None:
        self._consumer = consumer
        fetcher = consumer._fetcher  # built by the consumer's start, before its first poll
        plan = fetcher._get_actions_per_node

        def actions(assignment: Any) -> Any:
            bounds = self.bounds(bool(fetcher._records))
            fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes = bounds
            planned = plan(assignment)
            if sent := len(planned[0]):
                self.fetches += sent
                self.long_polling = bounds is self._long
                self.long_polls += sent if self.long_polling else 0
                if bounds is self._gather:
                    self.gathered += sent
                    self._gathering_after = self._polls
            return planned

        fetcher._get_actions_per_node = actions


Done = TypeVar("Done")


async def store_work(size: int, inline_limit: int, work: Callable[..., Done], *args: Any) -> Done:
    """Run a poll's synchronous store work (``work(*args)``, a transaction) on the event loop
    when the poll is small (``size`` ≤ ``inline_limit``: ``IMPRINT_INLINE_POLL_RECORDS``), in
    a worker thread otherwise. The size, not the rate, decides: a paced load makes small
    polls, whose thread crossings cost more than their wait on the database blocks the
    loop; a burst makes large ones, which overlap the loop's fetches and sends.

    The loop turns once before inline work: what the poll's taking woke goes first — the
    fetcher sends the next fetch (its gathering window starts now, not after the
    transaction), and the live feeds write what the last poll brought."""
    if size <= inline_limit:
        await asyncio.sleep(0)
        return work(*args)
    return await asyncio.to_thread(work, *args)


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
    gather_from: int = GATHER_FROM,
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
    records. A fetch gathers only after a poll of at least ``gather_from`` records (a busy
    consumer; :class:`Polls`): for a consumer nobody waits on per message (``gather_from``
    1), ``gather_ms`` of delay buys polls several times larger; one on the latency path
    gathers only when its polls show it is busy.

    Returns the consumer's :class:`Polls` (how it waits; its fetch counts).
    """

    commits = OffsetCommits(consumer, settings.offset_commit_seconds)
    polls = Polls(max_records, gather_ms=gather_ms, gather_from=gather_from, long_poll_ms=long_poll_ms)

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
                poisoned = await apply_isolating_poison(handle, inbound, consumer)
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

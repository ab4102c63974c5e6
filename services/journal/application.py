"""The runtime journal as an eventsourcing application (SPEC §1 "Runtime journal", X1–X9).

``RuntimeJournal.process(batch)`` takes decoded Kafka messages
(:class:`services.common.inbound.Inbound`) and, per partition of the batch, in
one database transaction:

1. skips every message at or below the partition's recorded tracking position
   (``max_tracking_id("<topic>#<partition>")``) — a redelivered batch is a no-op;
2. applies the rest to the journal's aggregates through the one loop
   (:class:`services.common.dispatch.Dispatch`) over :mod:`imprint.journal.handling`
   (executions, conversations, QCS identities, source standings, the lease records);
3. records all resulting events together with the tracking record of the
   partition's last offset (eventsourcing ``ProcessingEvent`` + ``EventStore.put``, on a
   ``ProcessRecorder``): events and consumer position commit atomically.

Optimistic concurrency does the coordination. Every event has a unique
``(originator_id, version)``; if another journal process wrote one of the same
aggregates meanwhile (an admission racing a deletion on the conversation, a
tombstone racing a completion on the execution or the source), the insert fails
with ``IntegrityError`` and the partition's unit of work is re-run against fresh
state — after re-reading the tracking position, so work another process already
committed is not redone. Partitions are processed one after the other, so two
partitions of one batch never contend with each other inside this process.

After a commit, the mutable message → execution index is updated (X4), and the
instance's lease book learns which runs opened or closed (X10).

Run leases (X10, :mod:`imprint.journal.leases`): the consumer renews the lease of every
run its poll's runtime records name (:meth:`RuntimeJournal.renew`, before the poll is
applied); a unit that opens or closes a run holds or releases it in the run's
``LeaseShard`` in the same transaction; a partition this instance takes is read from its
shard's record (:meth:`RuntimeJournal.take_shards`), one it loses is dropped; and the lease sweeper
(``services.journal.leases``) closes the runs that are due (:meth:`RuntimeJournal.lapse_due`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import ProcessRecorder, Recording
from eventsourcing.utils import get_topic
from opentelemetry.trace import Tracer

from imprint.contracts.base import Message
from imprint.contracts.conversation import DEFAULT_POLICY
from imprint.journal import handling, ids
from imprint.journal.announcements import announce
from imprint.journal.conversation import Conversation
from imprint.journal.execution import AnswerExecution
from imprint.journal.deletion import delete_conversation, retention_event_id
from imprint.journal.effects import Context, Effects
from imprint.journal.history import InMemoryMessageIndex, MessageIndex
from imprint.journal.keys import JournalKeys
from imprint.journal.leases import LeaseBook, LeaseShard
from imprint.journal.lifecycle import TERMINAL
from imprint.shredding import BulkKeyring
from services.common.backends import backend_for
from services.common.dispatch import Dispatch, Handled, Spans
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.common.event_log import EventLog, HotCacheApplication, StoredWorkspace, stored
from services.common.hot_cache import HOT_STATE_BYTES
from services.common.observability import get_logger
from services.common.handoff import Handoff
from services.common.unit_of_work import ConflictsExhausted, Recorded, Redelivered, TrackedUnitOfWork, Unconfirmed
from services.journal.message_index import StoreMessageIndex
from services.journal.run_leases import DEFAULT_LEASE_SECONDS, RunLeases

A = TypeVar("A", bound=Aggregate)


JournalConflict = ConflictsExhausted
"""A unit of work kept losing optimistic-concurrency races; the batch is not acknowledged."""

RETENTION_SWEEP = "journal.retention"
"""The retention sweep's position in the Journal's own log is tracked like a partition's."""
RETENTION_TRACKING = f"{RETENTION_SWEEP}#0"
RETENTION_PAGE = 200
"""Activities the retention sweep examines per unit of work."""

log = get_logger(__name__)


class RuntimeJournal(RunLeases, HotCacheApplication):
    """Executions and conversations stay in memory between messages, changed in place by the
    units of work (no re-read of a conversation's whole history per message)."""

    name = "journal"
    snapshotting_intervals = {LeaseShard: 200}
    """A shard is read whole when an instance takes its partition: from its latest snapshot on."""
    kept_after_done = 60.0
    """A closed execution stays in memory a minute more (:meth:`stays_hot`): Publication's
    ``answer.published`` of a run's last blocks trails the runtime's own end of the run, by
    as long as Publication is behind. After that it leaves, and the Journal holds the runs
    in flight, not every run it has seen."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        keyring: BulkKeyring,
        message_index: MessageIndex | None = None,
        name: str | None = None,
        max_attempts: int = 50,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        conversation_policy: str = DEFAULT_POLICY,
    ) -> None:
        if name:
            self.name = name  # table prefix (PostgreSQL) / environment prefix
        super().__init__(env)
        self.recorder: ProcessRecorder
        self.keyring = keyring
        self.keys = JournalKeys(keyring)
        self.sealer = self.keys.sealer
        self.message_index: MessageIndex = message_index if message_index is not None else InMemoryMessageIndex()
        self.max_attempts = max_attempts
        self.processing_lock = threading.RLock()
        self.units = TrackedUnitOfWork(max_attempts=max_attempts)
        self.sink = EventLog(self)
        self._owned: list[Any] = []
        """What :meth:`from_settings` opened for this journal, closed with it."""
        self.leases = LeaseBook(lease_seconds)
        """X10: the deadlines of the open runs of the runtime partitions this instance consumes."""
        self._leases_lock = threading.Lock()  # renewals come from the event loop, the rest from threads
        self.clock = clock
        self.conversation_policy = conversation_policy
        """X12: the policy of an admission that names none (``IMPRINT_CONVERSATION_POLICY``)."""
        self.tracer: Tracer | None = None
        """Tracing on (``services.common.tracing.active_tracer``): a ``journal apply`` span per message."""
        self.handoff: Handoff | None = None
        """The hand-off to the relay running in this process (``services.journal.relay``), if any."""

    def construct_recorder(self) -> ProcessRecorder:
        return self.factory.process_recorder()

    def stays_hot(self, aggregate: object) -> bool:
        """An execution that reached a terminal state (or whose conversation was erased) is done."""
        return not (isinstance(aggregate, AnswerExecution) and (aggregate.state in TERMINAL or aggregate.erased))

    def cache_clock(self) -> float:
        return self.clock()

    @classmethod
    def from_settings(cls, settings: Settings, *, keyring: BulkKeyring | None = None, name: str = "journal") -> RuntimeJournal:
        backend = backend_for(settings)
        index = backend.open(lambda: StoreMessageIndex(backend.tables(f"{name}_index"), f"{name}_message_index"))
        owned: list[Any] = [index]
        if keyring is None:
            keyring = backend.open(backend.keyring)
            owned.append(keyring)
        env = {**backend.environment(name), HOT_STATE_BYTES: str(settings.hot_state_bytes)}
        journal = backend.open(lambda: cls(env, keyring=keyring, message_index=index, name=name,
                                           lease_seconds=settings.run_lease_seconds,
                                           conversation_policy=settings.conversation_policy))
        journal._owned = owned
        return journal

    def close(self) -> None:
        for resource in self._owned:
            resource.close()
        self._owned = []
        super().close()

    # -- consuming ------------------------------------------------------------------------------

    def process(self, batch: Sequence[Inbound]) -> None:
        """Apply a batch of decoded messages; one transaction per partition, with its tracking record."""
        with self.processing_lock:
            outcome = self.units.run(batch, self._dispatch(), self.sink)
            match outcome:
                case Recorded(effects):
                    self._after_commit(effects)
                case Redelivered():
                    pass
                case Unconfirmed(_, error):  # nothing is assumed, the poll is retried
                    if self.handoff is not None:
                        self.handoff.missed()  # if it did commit, this process's relay reads it from the log
                    raise error
                case _:  # refused: nothing was recorded, the poll is retried
                    raise outcome.error  # type: ignore[union-attr]

    def _dispatch(self) -> Dispatch[StoredWorkspace, Context, Effects, list[Effects]]:
        """The poll through :mod:`imprint.journal.handling`, the keys of each attempt read
        once (:meth:`JournalKeys.scoped`); with a tracer, each message in a ``journal apply``
        span under the context its record carried (X9: its ids only)."""
        keys = self.keys
        policy = self.conversation_policy

        def contexts(fresh: Sequence[Inbound]) -> Callable[[Inbound], Context]:
            unit_keys = keys.scoped(item.message for item in fresh)
            return lambda item: Context(unit_keys, item.partition, policy)

        return Dispatch(handling, contexts, _effects, tracer=self.tracer, spans=APPLY)  # type: ignore[arg-type]

    def committed(self, recordings: list[Recording[UUID]]) -> None:
        """After each commit (:meth:`HotCacheApplication.record`): hand its events to this process's relay."""
        if self.handoff is not None:
            self.handoff.committed(recordings)

    def revoked(self, tracking_names: Sequence[str]) -> None:
        """These partitions now belong to another instance: forget their cached positions."""
        with self.processing_lock:
            self.sink.forget_partitions(tracking_names)

    def _untracked(self, work: Callable[[StoredWorkspace], Effects | None]) -> bool:
        """A unit of work no Kafka message caused; returns whether anything was recorded."""
        effects = self.units.run_untracked(_Untracked(work), self.sink)
        if effects is None:
            return False
        self._after_commit([effects])
        return True

    @property
    def conflicts(self) -> int:
        """How many units of work were re-run after losing a concurrency race (a metric)."""
        return self.units.conflicts

    def _after_commit(self, effects: Sequence[Effects]) -> None:
        intents = [intent for done in effects for intent in done.index]
        pointers = [(i.conversation_id, i.message_id, i.run_id) for i in intents if i.kind == "point"]
        if pointers:
            self.message_index.point_many(pointers)  # type: ignore[arg-type]
            # A deletion may have committed (and dropped the conversation's rows) between our commit
            # and this write. Deletion destroys the key before it commits, so checking the keys *after*
            # writing the pointers closes the window: either the deletion's drop comes after our write,
            # or we see the destroyed key here and drop it ourselves.
            for conversation_id in sorted(self.keyring.destroyed_among({p[0] for p in pointers})):
                self.message_index.drop_conversation(conversation_id)
        for done in effects:
            for change in done.leases:
                self._lease_changed(change)
        for intent in intents:
            if intent.kind == "drop":
                self.message_index.drop_conversation(intent.conversation_id)
                self.sink.forget()  # the cache must not keep what the destroyed key sealed

    # -- deletion and retention (X8) ------------------------------------------------------------

    def delete_conversation(self, conversation_id: str, account_id: str, event_id: str, reason: str = "user") -> bool:
        """Delete outside Kafka (e.g. an operator tool); same path as ``conversation.delete_requested``."""

        def work(ws: StoredWorkspace) -> Effects:
            return delete_conversation(ws, self.keys, conversation_id, account_id, event_id, reason)

        with self.processing_lock:
            return self._untracked(work)

    def sweep_retention(self, now: datetime, max_age: timedelta) -> list[str]:
        """Delete every conversation whose last activity is older than ``max_age``. Returns their ids.

        The sweep follows the Journal's own log like a consumer follows a partition: its
        position (the tracking record :data:`RETENTION_TRACKING`) is the last activity —
        a conversation started, an execution bound to it — it examined, and it examines an
        activity only once the activity is older than the cutoff. A conversation active
        since then has a later activity the sweep reaches in its time, so each sweep reads
        what the log gained since the last, never the whole log. Each unit re-checks the
        conversation's age, so an admission that commits meanwhile wins; the position
        commits with the deletions it caused, so two instances never delete twice."""
        cutoff = now - max_age
        topics = [get_topic(Conversation.Started), get_topic(Conversation.ExecutionBound)]
        deleted: list[str] = []
        while True:
            start = self.sink.position(RETENTION_TRACKING) + 1
            page = self.recorder.select_notifications(start=max(start, 1), limit=RETENTION_PAGE, topics=topics)
            aged: list[Inbound] = []
            for notification in page:
                activity = self.mapper.to_domain_event(notification)
                if activity.timestamp > cutoff:
                    break
                aged.append(Inbound(RETENTION_SWEEP, 0, notification.id, activity))
            if aged:
                with self.processing_lock:
                    outcome = self.units.run(aged, _Expiring(self.keys, cutoff), self.sink)
                match outcome:
                    case Recorded((effects, expired)):
                        self._after_commit(effects)
                        deleted.extend(expired)
                    case Redelivered():  # another instance swept these meanwhile
                        pass
                    case _:
                        raise outcome.error  # type: ignore[union-attr]
            if len(aged) < RETENTION_PAGE:
                return deleted

    # -- reads ----------------------------------------------------------------------------------

    def _get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        try:
            agg = stored(self, aggregate_id)
        except AggregateNotFoundError:
            return None
        return agg if isinstance(agg, cls) else None

    def execution(self, run_id: str) -> AnswerExecution | None:
        return self._get(AnswerExecution, ids.execution_id(run_id))

    def conversation(self, conversation_id: str) -> Conversation | None:
        return self._get(Conversation, ids.conversation_id(conversation_id))

    def rebuild_message_index(self, conversation_id: str) -> int:
        """Re-point the index from the immutable bindings (latest admitted execution per message)."""
        conv = self.conversation(conversation_id)
        if conv is None or conv.deleted:
            self.message_index.drop_conversation(conversation_id)
            return 0
        latest: dict[str, str] = {}
        for b in conv.bindings:
            ex = self.execution(b.run_id)
            if ex is not None and ex.request is not None and ex.request.message_id == b.message_id:
                latest[b.message_id] = b.run_id
        for message_id, run_id in latest.items():
            self.message_index.point(conversation_id, message_id, run_id)
        return len(latest)

    def announcements(self, after: int = 0, limit: int = 100) -> list[tuple[int, Message | None]]:
        """Committed events after log position ``after``, each with what it announces on
        ``imprint.runs.v1`` (a lease lapse: on ``imprint.control.v1``; ``None``: nothing). Read
        from the committed log only, so a ``run.closed`` is never announced before the closed
        execution is persisted."""
        notifications = self.recorder.select_notifications(start=after, limit=limit, inclusive_of_start=False)
        return [(n.id, announce(self.mapper.to_domain_event(n), self.sealer)) for n in notifications]


def open_journal(settings: Settings, *, keyring: BulkKeyring | None = None) -> RuntimeJournal:
    """The journal of this deployment (PostgreSQL or SQLite per settings), with its keyring and index."""
    return RuntimeJournal.from_settings(settings, keyring=keyring)


APPLY: Spans[Effects] = Spans("journal apply", lambda message: message.trace_ids())
"""Every message of a traced poll in a span of its own, with its ids."""


def _effects(ws: StoredWorkspace, handled: list[Handled[Effects]]) -> list[Effects]:
    return [done.effects for done in handled]


class _Expiring:
    """X8's retention as a policy over activities of the Journal's own log: each
    conversation they name that is idle since ``cutoff`` and not yet deleted is deleted.
    Returns the index intents and the conversations deleted."""

    def __init__(self, keys: JournalKeys, cutoff: datetime) -> None:
        self.keys = keys
        self.cutoff = cutoff

    def apply(self, ws: StoredWorkspace, fresh: Sequence[Inbound]) -> tuple[list[Effects], list[str]]:
        effects: list[Effects] = []
        deleted: list[str] = []
        for conversation_uuid in dict.fromkeys(item.message.originator_id for item in fresh):
            conv = ws.get(Conversation, conversation_uuid)
            if conv is None or conv.deleted or conv.last_activity_at > self.cutoff:
                continue
            eid = retention_event_id(conv.conversation_id, conv.last_activity_at.isoformat())
            effects.append(delete_conversation(ws, self.keys, conv.conversation_id, conv.account_id, eid,
                                               "retention"))
            deleted.append(conv.conversation_id)
        return effects, deleted

    def shown(self, result: tuple[list[Effects], list[str]]) -> bool:
        return False


class _Untracked:
    """A unit no Kafka message caused, as a policy."""

    def __init__(self, work: Callable[[StoredWorkspace], Effects | None]) -> None:
        self.work = work

    def apply(self, ws: StoredWorkspace, fresh: Sequence[Inbound]) -> Effects | None:
        return self.work(ws)

    def shown(self, effects: Effects | None) -> bool:
        return False

"""The Publication store: an eventsourcing application whose log is the single
record of what Publication decided.

``process`` takes one consumer poll and commits it in ONE transaction through the
tracked unit of work (:mod:`services.common.unit_of_work`): every aggregate the poll
touched, plus the Kafka tracking record of each partition's last message (P15). A
modification's quota use is made durable *before* its preview is emitted (P13, P14), so
a preview that was shown keeps its quota even if the final commit fails. How a commit
that did not plainly succeed is settled is :mod:`imprint.publication.saving`."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from eventsourcing.application import AggregateNotFoundError, ProcessingEvent
from eventsourcing.persistence import EventStore, IntegrityError, OperationalError, Recording
from eventsourcing.utils import get_topic
from opentelemetry.trace import Tracer

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import Policy, PublicationRun, SourceRecord, handling, saving
from imprint.publication.handling import Context, Effects, PollEffects, SettledCandidate
from imprint.publication.sources import SourceDependents
from imprint.shredding import FieldSealer, KeyDestroyed, Keyring, key_name_for
from services.common.backends import backend_for
from services.common.dispatch import Dispatch, Handled
from services.common.event_log import EventLog, HotCacheApplication, StoredWorkspace, stored
from services.common.hot_cache import HOT_STATE_BYTES
from services.common.inbound import Inbound
from services.common.observability import get_logger
from services.common.recorders import PollRecorder, binary_inserts
from services.common.handoff import Handoff
from services.common.settings import Settings
from services.common.unit_of_work import Conflict, Recorded, Refused, Steps, TrackedUnitOfWork, Unconfirmed, through
from services.publication.keys import RecentKeys
from services.publication.sealing import SealingMapper
from services.publication.spans import DECIDE, PollSpans, poll_spans

if TYPE_CHECKING:  # the recovery tools open this log too, and never touch Kafka
    from services.common.kafka import Outgoing

log = get_logger(__name__)

EmitMany = Callable[[Sequence["Outgoing"]], None]
RUN_OPENED = get_topic(PublicationRun.Opened)
"""The topic of a run's first event: what lists the runs of the log."""


class SaveUnconfirmed(OperationalError):
    """The commit's outcome could not be confirmed and the read-back found it missing:
    a transient persistence failure, so the poll is retried, never assumed."""


class PublicationLog(HotCacheApplication):
    name = "publication"
    is_snapshotting_enabled = True
    snapshotting_intervals = {PublicationRun: 100, SourceRecord: 200, SourceDependents: 200}
    in_memory_overhead = 2.2
    """A run's events carry its sealed bodies and views, which the run does not keep (only
    their digests): it takes less memory per stored byte than the Journal's aggregates.
    Calibrated with them (``tests/component/common/test_hot_cache_calibration.py``)."""

    def __init__(self, keyring: Keyring, env: dict[str, str] | None = None, policy: Policy | None = None) -> None:
        self.keyring = RecentKeys(keyring)
        super().__init__(env)
        self.policy = policy or Policy()
        self.units = TrackedUnitOfWork()
        self.sink = EventLog(self)
        self._processing = threading.Lock()
        self._snapshotted: dict[uuid.UUID, int] = {}
        """Aggregate id → version of its last snapshot taken (or assumed) by this process."""
        self.handoff: Handoff | None = None
        """This process's relay, when it runs here: handed every commit (:meth:`committed`)."""
        self.tracer: Tracer | None = None
        """Tracing on (``services.common.tracing.active_tracer``): a poll's spans (``spans``)."""
        self._spans: PollSpans | None = None

    def stays_hot(self, aggregate: object) -> bool:
        """A run that ended leaves the hot cache: what may still reach it (a withdrawal, a
        deletion, a proposal after the end) is rare and reads it back from the log. Asked at
        every commit, of every aggregate it recorded, so it reads the run's ``ended`` (what
        ``PublicationRun.has_ended`` says) as the attribute it is, without a call into the
        run's code for each."""
        return not (isinstance(aggregate, PublicationRun) and aggregate.ended is not None)

    def construct_recorder(self) -> PollRecorder:
        recorder: PollRecorder = self.factory.process_recorder()  # type: ignore[assignment]
        if self.factory.env_create_table():  # type: ignore[attr-defined]
            recorder.index_topic("run_openings", RUN_OPENED)  # a whole-log replay lists the runs from these (R1)
        return recorder

    def construct_snapshot_store(self) -> EventStore[uuid.UUID]:
        store = super().construct_snapshot_store()
        binary_inserts(store.recorder)  # snapshots go to the server in binary, like the events
        return store

    def construct_mapper(self) -> SealingMapper:
        """Block bodies are sealed under their conversation's key before they reach the log (X8)."""
        sealer = FieldSealer(self.keyring, purpose="publication")
        return SealingMapper(self.construct_transcoder(), sealer)

    # --- reading ------------------------------------------------------------------

    def run(self, run_id: str) -> PublicationRun | None:
        try:
            return stored(self, PublicationRun.id_for(run_id))
        except AggregateNotFoundError:
            return None

    def position(self, tracking_name: str) -> int:
        """The last Kafka offset of ``<topic>#<partition>`` committed with its effects (-1: none)."""
        return self.sink.position(tracking_name)

    # --- processing a poll ----------------------------------------------------------

    def process(self, batch: Sequence[Inbound], emit: EmitMany) -> None:
        """A poll in one unit of work and one transaction; a commit that did not plainly
        succeed is settled as P15 says (:mod:`imprint.publication.saving`)."""
        through(self.steps(batch, emit))

    def steps(self, batch: Sequence[Inbound], emit: EmitMany) -> Steps[None]:
        """:meth:`process`, paused where its previews are emitted and its commit is next
        (:meth:`TrackedUnitOfWork.steps`): a caller on the event loop sends them there, so
        they are on the wire before the commit starts (P14)."""
        with self._processing, poll_spans(self.tracer) as spans:
            self._spans = spans
            outcome = yield from self.units.steps(batch, self._dispatch(emit, spans), self.sink)
            if spans is not None:
                spans.settled(outcome)
            match outcome:
                case Recorded(unit):
                    self._after_commit(unit)
                case Conflict(unit, error):
                    # Previews went out on state that lost the race: a failed save, then the poll is retried.
                    self._save_failed(unit.settled, saving.LOST_RACE, emit)
                    raise error
                case Refused(unit, error):
                    self._save_failed(unit.settled, type(error).__name__, emit)
                    raise error
                case Unconfirmed(unit, error):
                    self._save_unknown(unit, error, emit)
                    self._after_commit(unit)

    def _dispatch(self, emit: EmitMany, spans: PollSpans | None) -> Dispatch[StoredWorkspace, Context, Effects,
                                                                               PollEffects]:
        """The poll through :mod:`imprint.publication.handling`, its previews emitted before
        the commit (P14); with ``spans``, a span per proposal and per commit
        (:mod:`services.publication.spans`)."""
        policy = self.policy

        def context(item: Inbound) -> Context:
            return Context(policy, item.size, shard=str(item.partition))

        def gather(ws: StoredWorkspace, handled: list[Handled[Effects]]) -> PollEffects:
            unit = PollEffects([preview for done in handled for preview in done.effects.previews],
                               [settled for done in handled for settled in done.effects.settled],
                               {key for done in handled for key in done.effects.shred})
            if spans is None:
                if unit.previews:
                    emit([(Topic.PUBLICATION, preview) for preview in unit.previews])
                return unit
            if unit.previews:  # each under its proposal's decision
                emit([(Topic.PUBLICATION, preview, done.trace) for done in handled for preview in done.effects.previews])
            spans.committing(handled)
            return unit

        return Dispatch(handling, lambda fresh: context, gather, shown=lambda unit: bool(unit.previews),  # type: ignore[arg-type]
                        tracer=None if spans is None else spans.tracer, spans=DECIDE)

    def revoked(self, tracking_names: Sequence[str]) -> None:
        """These partitions now belong to another instance: forget what was cached for them
        (after the unit in progress, if any, has finished)."""
        with self._processing:
            self.sink.forget_partitions(tracking_names)

    def _after_commit(self, unit: PollEffects) -> None:
        if unit.shred:
            for key_name in unit.shred:
                self.keyring.destroy(key_name)
            self.sink.forget()  # the cache must not keep serving bodies whose key is gone
            log.info("conversation keys destroyed", keys=len(unit.shred))

    def committed(self, recordings: list[Recording[uuid.UUID]]) -> None:
        if self.handoff is not None:
            spans = self._spans
            self.handoff.committed(recordings, None if spans is None else spans.context_of)

    def _facts(self, messages: Sequence[Message]) -> list[Outgoing]:
        spans = self._spans
        return [(Topic.PUBLICATION, message) for message in messages] if spans is None else spans.facts(messages)

    # --- snapshots ----------------------------------------------------------------------

    def take_snapshots(self, processing_event: ProcessingEvent[uuid.UUID]) -> None:
        """Snapshot a hot aggregate from memory — never by replaying it — once the events
        since its last snapshot are at least as many as the records its state holds (and at
        least the class's interval). A snapshot costs what the state holds, so spacing them
        by that size keeps the cost per event flat however long a run or a source grows,
        and a reload still reads at most one snapshot plus a tail no longer than it.

        Each aggregate's first snapshot comes at its own point of the first interval
        (:func:`_phase`): runs admitted together and proposing in turn reach each interval
        together, and their snapshots, all due in the same few polls, held those polls
        (and every preview behind them) for hundreds of milliseconds."""
        assert self.snapshots is not None
        due = []
        for aggregate_id, aggregate in processing_event.aggregates.items():
            interval = self.snapshotting_intervals.get(type(aggregate))
            if interval is None:
                continue
            last = self._snapshotted.get(aggregate_id)
            if last is None:
                last = self._snapshotted[aggregate_id] = (
                    aggregate.version - (aggregate.version + _phase(aggregate_id, interval)) % interval)
            if aggregate.version - last >= max(interval, _records_held(aggregate)):
                # The library's own choice of snapshot class (Application.take_snapshot).
                snapshot_class = getattr(type(aggregate), "Snapshot", type(self).snapshot_class)
                due.append(snapshot_class.take(aggregate))
                self._snapshotted[aggregate_id] = aggregate.version
        if due:
            self.snapshots.put(due)
        if len(self._snapshotted) > 100_000:
            self._snapshotted.clear()

    # --- committing -------------------------------------------------------------------

    def put_events(self, processing_event: ProcessingEvent[uuid.UUID]) -> list[Recording[uuid.UUID]]:
        """The events put in the store, with each run's events sealed under its conversation's
        key (the mapper is told which key belongs to which run before it maps them, and the
        unit's keys are read, or created, together first: :meth:`RecentKeys.prepare`)."""
        assert isinstance(self.mapper, SealingMapper)
        key_names: set[str] = set()
        for aggregate in processing_event.aggregates.values():
            if isinstance(aggregate, PublicationRun):
                key_name = key_name_for(aggregate.run_id, aggregate.conversation_id)
                self.mapper.bind(aggregate.id, key_name)
                key_names.add(key_name)
        try:
            self.keyring.prepare(key_names)
            return super().put_events(processing_event)
        except KeyDestroyed as error:
            # Another instance deleted the conversation after this one loaded the run: the
            # run is stale (the deletion marked it), so this is a lost race, not a bad message.
            raise IntegrityError(f"conversation key destroyed under a stale run: {error}") from error

    def _save_failed(self, settled: Sequence[SettledCandidate], error: str, emit: EmitMany) -> None:
        """P15: a refused commit leaves a failure fact, in the log when it is writable."""
        if not settled:
            return
        policy = _FailureFacts(settled, error)
        try:
            self.units.run_untracked(policy, self.sink)
        except Exception:  # noqa: BLE001 — the log is not writable: announce the facts directly
            log.warning("could not record the save failure in the log; announcing it directly")
            emit(self._facts(saving.save_failed(settled, error)))

    def _save_unknown(self, unit: PollEffects, error: Exception, emit: EmitMany) -> None:
        log.warning("commit outcome unknown; reading back", error=type(error).__name__)
        if self.handoff is not None:
            self.handoff.missed()  # if it did commit, this process's relay reads it from the log
        if unit.settled:
            emit(self._facts(saving.save_unknown(unit.settled)))
        self.sink.forget()
        if not saving.confirmed(unit.settled, self.run):
            raise SaveUnconfirmed("not found on read-back: " + ", ".join(e.candidate_id for e in unit.settled)) \
                from error


class _FailureFacts:
    """A unit that records P15's failure facts on the runs of a refused commit."""

    def __init__(self, settled: Sequence[SettledCandidate], error: str) -> None:
        self.settled = settled
        self.error = error

    def apply(self, ws: StoredWorkspace, fresh: Sequence[Inbound]) -> bool:
        saving.record_failures(ws, self.settled, self.error)
        return True

    def shown(self, result: bool) -> bool:
        return False


def _phase(aggregate_id: uuid.UUID, interval: int) -> int:
    """Where in the interval an aggregate's snapshots fall: fixed by its id, so a restart
    keeps each aggregate's schedule, and spread evenly over the aggregates."""
    return aggregate_id.int % interval


def _records_held(aggregate: object) -> int:
    """How many records an aggregate's state holds: what one snapshot of it costs."""
    state = vars(aggregate)
    return max(len(state.get(name, ())) for name in ("blocks", "candidates", "dependents", "runs"))


def open_log(settings: Settings) -> PublicationLog:
    """The Publication log of this deployment, on its backend, with its key store and policy."""
    backend = backend_for(settings)
    policy = Policy(
        modifications_per_block=settings.block_modification_quota,
        modifications_per_run=settings.run_modification_quota,
        display_char_limit=settings.display_char_limit,
    )
    env = {**backend.environment(PublicationLog.name), HOT_STATE_BYTES: str(settings.hot_state_bytes)}
    keyring = backend.open(backend.keyring)
    return backend.open(lambda: PublicationLog(keyring, env=env, policy=policy))

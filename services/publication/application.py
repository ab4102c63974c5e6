"""The Publication store: an eventsourcing application whose log is the single
record of what Publication decided.

``process`` takes one consumer poll and commits it in as few transactions as
possible: every aggregate the poll touched, plus the Kafka tracking record of the
poll's last message on that partition, in ONE transaction (P15). A modification's
quota use is committed on its own *before* its preview is emitted (P13, P14), so a
preview that was shown keeps its quota even if the final commit fails.

Failure outcomes (P15):
* the database refused the commit (a conflict, a privilege, bad data: any
  persistence error other than a lost connection) → ``answer.save_failed`` (and a failure fact when
  the log is writable), then the poll is retried;
* the outcome cannot be confirmed (connection lost around COMMIT) →
  ``answer.save_unknown``, then the candidates are read back by identity: committed
  means done (the relay announces it), not committed means the poll is retried.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence

from eventsourcing.application import AggregateNotFoundError, ProcessingEvent
from eventsourcing.persistence import (
    EventStore,
    IntegrityError,
    InterfaceError,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    Recording,
    Tracking,
)
from eventsourcing.utils import get_topic

from imprint.contracts.base import Message
from imprint.contracts.publication import AnswerSaveFailed, AnswerSaveUnknown
from imprint.contracts.topics import Topic
from imprint.publication import Policy, PublicationRun, SourceRecord
from imprint.publication.sources import SourceDependents
from imprint.publication.handling import Context, SettledCandidate, Unit, aggregates_read, handle
from imprint.shredding import FieldSealer, KeyDestroyed, Keyring, key_name_for
from services.common.inbound import Inbound
from services.common.observability import get_logger
from services.common.recorders import binary_inserts, tracking_many
from services.common.relay import Handoff
from services.common.unit_of_work import HotCacheApplication, StoredWorkspace, TrackedUnitOfWork, stored
from services.publication.sealing import RecentKeys, SealingMapper

log = get_logger(__name__)

EmitMany = Callable[[Sequence[tuple[Topic, Message]]], None]
RUN_OPENED = get_topic(PublicationRun.Opened)
"""The topic of a run's first event: what lists the runs of the log."""


class SaveUnconfirmed(OperationalError):
    """The commit's outcome could not be confirmed and the read-back found it missing:
    a transient persistence failure, so the poll is retried, never assumed."""


class PublicationLog(HotCacheApplication):
    name = "publication"
    is_snapshotting_enabled = True
    snapshotting_intervals = {PublicationRun: 100, SourceRecord: 200, SourceDependents: 200}

    def __init__(self, keyring: Keyring, env: dict[str, str] | None = None, policy: Policy | None = None) -> None:
        self.keyring = RecentKeys(keyring)
        super().__init__(tracking_many(env))
        self.policy = policy or Policy()
        self.units: TrackedUnitOfWork[Unit] = TrackedUnitOfWork(self)
        self._processing = threading.Lock()
        self._snapshotted: dict[uuid.UUID, int] = {}
        """Aggregate id → version of its last snapshot taken (or assumed) by this process."""
        self.handoff: Handoff | None = None
        """This process's relay, when it runs here: handed every commit (``_notify``)."""

    def construct_recorder(self) -> ProcessRecorder:
        recorder = self.factory.process_recorder()
        index_topic = getattr(recorder, "index_topic", None)  # the in-memory recorder has no tables
        if index_topic is not None and self.factory.env_create_table():  # type: ignore[attr-defined]
            index_topic("run_openings", RUN_OPENED)  # a whole-log replay lists the runs from these (R1)
        return recorder

    def construct_snapshot_store(self) -> EventStore[uuid.UUID]:
        store = super().construct_snapshot_store()
        binary_inserts(store.recorder)  # snapshots go to the server in binary, like the events
        return store

    def construct_mapper(self) -> SealingMapper:
        """Block bodies are sealed under their conversation's key before they reach the log (X8)."""
        sealer = FieldSealer(self.keyring, purpose="publication")
        return SealingMapper(self.construct_transcoder(), sealer)

    @property
    def process_recorder(self) -> ProcessRecorder:
        assert isinstance(self.recorder, ProcessRecorder)
        return self.recorder

    # --- reading ------------------------------------------------------------------

    def run(self, run_id: str) -> PublicationRun | None:
        try:
            return stored(self, PublicationRun.id_for(run_id))
        except AggregateNotFoundError:
            return None

    def position(self, tracking_name: str) -> int:
        """The last Kafka offset of ``<topic>#<partition>`` committed with its effects (-1: none)."""
        return self.units.position(tracking_name)

    # --- processing a poll ----------------------------------------------------------

    def process(self, batch: Sequence[Inbound], emit: EmitMany) -> None:
        """One unit of work (one transaction) per partition of the poll."""
        with self._processing:
            self._process_poll(batch, emit)

    def revoked(self, tracking_names: Sequence[str]) -> None:
        """These partitions now belong to another instance: forget what was cached for them
        (after the unit in progress, if any, has finished)."""
        with self._processing:
            self.units.forget_partitions(tracking_names)

    def _process_poll(self, batch: Sequence[Inbound], emit: EmitMany) -> None:
        def work(ws: StoredWorkspace, fresh: list[Inbound]) -> Unit:
            unit = Unit()
            ws.look_up(aggregate_id for item in fresh for aggregate_id in aggregates_read(item.message))
            for item in fresh:
                effects = handle(ws, item.message, Context(self.policy, item.size, str(item.partition)))
                if effects.durable_first:
                    self._record_unit(ws)  # P13: the quota a preview is about to show is durable first
                if effects.then is not None:
                    effects.then.record(ws)
                unit.add(effects)
            if unit.previews:
                emit([(Topic.PUBLICATION, preview) for preview in unit.previews])
            return unit

        def on_conflict(error: IntegrityError, unit: Unit | None) -> None:
            if unit is not None and unit.previews:
                # Previews went out on state that lost the race: a failed save (P15), then the poll is retried.
                self._save_failed(unit.settled, "integrity_error", emit)
                raise error

        for unit in self.units.run_poll(batch, work, on_conflict=on_conflict,
                                        commit=lambda ws, trackings, unit: self._commit(ws, trackings, unit, emit)):
            self._after_commit(unit)

    def _after_commit(self, unit: Unit) -> None:
        if unit.shred:
            for key_name in unit.shred:
                self.keyring.destroy(key_name)
            self.units.forget()  # the cache must not keep serving bodies whose key is gone
            log.info("conversation keys destroyed", keys=len(unit.shred))

    def _notify(self, recordings: list[Recording[uuid.UUID]]) -> None:
        if self.handoff is not None:
            self.handoff.committed(recordings)

    # --- snapshots ----------------------------------------------------------------------

    def _take_snapshots(self, processing_event: ProcessingEvent[uuid.UUID]) -> None:
        """Snapshot a hot aggregate from memory — never by replaying it — once the events
        since its last snapshot are at least as many as the records its state holds (and at
        least the class's interval). A snapshot costs what the state holds, so spacing them
        by that size keeps the cost per event flat however long a run or a source grows,
        and a reload still reads at most one snapshot plus a tail no longer than it."""
        assert self.snapshots is not None
        due = []
        for aggregate_id, aggregate in processing_event.aggregates.items():
            interval = self.snapshotting_intervals.get(type(aggregate))
            if interval is None:
                continue
            last = self._snapshotted.get(aggregate_id)
            if last is None:
                last = self._snapshotted[aggregate_id] = aggregate.version - aggregate.version % interval
            if aggregate.version - last >= max(interval, _records_held(aggregate)):
                snapshot_class = getattr(type(aggregate), "Snapshot", type(self).snapshot_class)
                due.append(snapshot_class.take(aggregate))
                self._snapshotted[aggregate_id] = aggregate.version
        if due:
            self.snapshots.put(due)
        if len(self._snapshotted) > 100_000:
            self._snapshotted.clear()

    # --- committing -------------------------------------------------------------------

    def _bind_keys(self, ws: StoredWorkspace) -> None:
        assert isinstance(self.mapper, SealingMapper)
        for aggregate in ws.aggregates():
            if isinstance(aggregate, PublicationRun):
                self.mapper.bind(aggregate.id, key_name_for(aggregate.run_id, aggregate.conversation_id))

    def _record_unit(self, ws: StoredWorkspace, trackings: Sequence[Tracking] = ()) -> None:
        self._bind_keys(ws)
        try:
            ws.record(trackings)
        except KeyDestroyed as error:
            # Another instance deleted the conversation after this one loaded the run: the
            # run is stale (the deletion marked it), so this is a lost race, not a bad message.
            raise IntegrityError(f"conversation key destroyed under a stale run: {error}") from error

    def _commit(self, ws: StoredWorkspace, trackings: list[Tracking], unit: Unit, emit: EmitMany) -> None:
        try:
            self._record_unit(ws, trackings)
        except IntegrityError:
            raise  # the unit of work tells a redelivery from a conflict
        except (OperationalError, InterfaceError) as error:
            self._save_unknown(ws, trackings, unit, error, emit)
        except PersistenceError as error:
            # Refused outright (privileges, data, internal error): nothing was committed.
            # Only the class name goes out: a database message may quote private values.
            ws.forget()
            self._save_failed(unit.settled, type(error).__name__, emit)
            raise

    def _save_failed(self, settled: Sequence[SettledCandidate], error: str, emit: EmitMany) -> None:
        """P15: a refused commit leaves a failure fact. Recorded in the log when the log
        is writable (the relay then announces it, once, with a deterministic id);
        published straight to the topic only when it is not."""
        retry = StoredWorkspace(self)
        try:
            for entry in settled:
                run = retry.get(PublicationRun, PublicationRun.id_for(entry.run_id)) or PublicationRun(entry.run_id)
                retry.add(run)
                run.record_save_failure(entry.candidate_id, error, entry.block_ids)
            self._bind_keys(retry)
            retry.record()
        except Exception:
            retry.forget()
            log.warning("could not record the save failure in the log; announcing it directly")
            self._emit_outcomes(settled, emit, lambda entry: AnswerSaveFailed(
                run_id=entry.run_id, candidate_id=entry.candidate_id, block_ids=list(entry.block_ids), error=error))

    def _save_unknown(self, ws: StoredWorkspace, trackings: list[Tracking], unit: Unit, error: Exception,
                      emit: EmitMany) -> None:
        log.warning("commit outcome unknown; reading back", error=type(error).__name__)
        if self.handoff is not None:
            self.handoff.missed()  # if it did commit, this process's relay reads it from the log
        self._emit_outcomes(unit.settled, emit, lambda entry: AnswerSaveUnknown(
            run_id=entry.run_id, candidate_id=entry.candidate_id, block_ids=list(entry.block_ids)))
        ws.forget()
        for tracking in trackings:
            if not self.process_recorder.has_tracking_id(tracking.application_name, tracking.notification_id):
                raise SaveUnconfirmed(f"poll ending at {tracking} is not in the log") from error
        for entry in unit.settled:
            run = self.run(entry.run_id)
            if run is None or run.settled(entry.candidate_id) is None:
                raise SaveUnconfirmed(f"{entry.candidate_id} not found on read-back") from error

    @staticmethod
    def _emit_outcomes(settled: Sequence[SettledCandidate], emit: EmitMany,
                       make: Callable[[SettledCandidate], Message]) -> None:
        if settled:
            emit([(Topic.PUBLICATION, make(entry)) for entry in settled])


def _records_held(aggregate: object) -> int:
    """How many records an aggregate's state holds: what one snapshot of it costs."""
    state = vars(aggregate)
    return max(len(state.get(name, ())) for name in ("blocks", "candidates", "dependents", "runs"))

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

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
)

from imprint.contracts.base import Message
from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.publication import AnswerSaveFailed, AnswerSaveUnknown, WithdrawalCause
from imprint.contracts.runtime import (
    EvidenceGranted,
    NumericIssued,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunRejected,
    RunStopped,
    RunThrottled,
)
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.contracts.topics import Topic
from services.common.observability import get_logger
from imprint.shredding import FieldSealer, Keyring
from imprint.publication import (
    Commit,
    ConversationRuns,
    IntakeRefusal,
    Policy,
    PublicationRun,
    SourceRecord,
    SourceStanding,
    intake,
    preview_for,
    sources_to_check,
)
from services.common.inbound import Inbound
from services.publication.sealing import RecentKeys, SealingMapper, key_name_for

log = get_logger(__name__)

EmitMany = Callable[[Sequence[tuple[Topic, Message]]], None]
CANDIDATE_TYPES = frozenset({"answer.text", "answer.part", "model.frame", "model.reasoning", "router.result"})


class SaveUnconfirmed(OperationalError):
    """The commit's outcome could not be confirmed and the read-back found it missing:
    a transient persistence failure, so the poll is retried, never assumed."""


@dataclass
class UnitOfWork:
    """The aggregates one transaction will commit, loaded once per poll."""

    app: PublicationLog
    runs: dict[str, PublicationRun] = field(default_factory=dict)
    sources: dict[str, SourceRecord] = field(default_factory=dict)
    conversations: dict[str, ConversationRuns | None] = field(default_factory=dict)
    candidates: list[tuple[str, str, list[str]]] = field(default_factory=list)
    """(run_id, candidate_id, block ids) settled in this unit, for save outcomes."""
    shred: set[str] = field(default_factory=set)
    """Key names to destroy once this unit is committed (X8)."""

    def run(self, run_id: str) -> PublicationRun:
        if run_id not in self.runs:
            try:
                self.runs[run_id] = self.app.repository.get(PublicationRun.id_for(run_id))
            except AggregateNotFoundError:
                self.runs[run_id] = PublicationRun(run_id)
        return self.runs[run_id]

    def source(self, source_id: str, *, create: bool) -> SourceRecord | None:
        if source_id not in self.sources:
            try:
                self.sources[source_id] = self.app.repository.get(SourceRecord.id_for(source_id))
            except AggregateNotFoundError:
                if not create:
                    return None
                self.sources[source_id] = SourceRecord(source_id)
        return self.sources[source_id]

    def conversation(self, conversation_id: str, account_id: str | None = None) -> ConversationRuns | None:
        """The conversation's run index; created only when ``account_id`` is given (at admission)."""
        if conversation_id not in self.conversations or (
            self.conversations[conversation_id] is None and account_id is not None
        ):
            try:
                self.conversations[conversation_id] = self.app.repository.get(ConversationRuns.id_for(conversation_id))
            except AggregateNotFoundError:
                self.conversations[conversation_id] = (
                    ConversationRuns(conversation_id, account_id) if account_id is not None else None)
        return self.conversations[conversation_id]

    def deleted_conversation(self, run: PublicationRun) -> bool:
        conversation = self.conversation(run.conversation_id) if run.conversation_id else None
        return conversation is not None and conversation.deleted

    def standing(self, source_ids: Iterable[str]) -> SourceStanding:
        facts = [record.standing() for sid in set(source_ids) if (record := self.source(sid, create=False))]
        return SourceStanding.of(*facts)

    def aggregates(self) -> list[Any]:
        conversations = [c for c in self.conversations.values() if c is not None]
        return [*self.runs.values(), *self.sources.values(), *conversations]

    def forget(self) -> None:
        """Drop everything this unit touched from the repository cache (it may hold unsaved state)."""
        cache = self.app.repository.cache
        if cache is not None:
            for aggregate in self.aggregates():
                try:
                    cache.get(aggregate.id, evict=True)
                except KeyError:
                    pass


class PublicationLog(Application[uuid.UUID]):
    name = "publication"
    is_snapshotting_enabled = True
    snapshotting_intervals = {PublicationRun: 100, SourceRecord: 200}
    env = {"AGGREGATE_CACHE_MAXSIZE": "10000"}

    def __init__(self, keyring: Keyring, env: dict[str, str] | None = None, policy: Policy | None = None) -> None:
        self.keyring = RecentKeys(keyring)
        super().__init__(env)
        self.policy = policy or Policy()
        self._positions: dict[str, int] = {}

    def construct_recorder(self) -> ProcessRecorder:
        return self.factory.process_recorder()

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
            return self.repository.get(PublicationRun.id_for(run_id))
        except AggregateNotFoundError:
            return None

    def position(self, tracking_name: str) -> int:
        """The last Kafka offset of ``<topic>#<partition>`` committed with its effects (-1: none)."""
        if tracking_name not in self._positions:
            recorded = self.process_recorder.max_tracking_id(tracking_name)
            self._positions[tracking_name] = -1 if recorded is None else recorded
        return self._positions[tracking_name]

    # --- processing a poll ----------------------------------------------------------

    def process(self, batch: Sequence[Inbound], emit: EmitMany) -> None:
        for name, group in groupby(batch, key=lambda item: item.tracking.application_name):
            items = list(group)
            fresh = [item for item in items if item.offset > self.position(name)]
            if len(fresh) < len(items):
                log.info("redelivered positions skipped", tracking=name, skipped=len(items) - len(fresh),
                         committed_through=self.position(name))
            if fresh:
                self._process_partition(fresh, emit)

    def _process_partition(self, items: list[Inbound], emit: EmitMany) -> None:
        unit = UnitOfWork(self)
        previews: list[tuple[Topic, Message]] = []
        try:
            for item in items:
                previews.extend(self._apply(unit, item, emit))
            if previews:
                emit(previews)
            self._commit(unit, items[-1], emit)
        except BaseException:
            unit.forget()
            raise

    def _apply(self, unit: UnitOfWork, item: Inbound, emit: EmitMany) -> list[tuple[Topic, Message]]:
        message = item.message
        match message:
            case RunAdmitted():
                run = unit.run(message.run_id)
                run.note_admission(message.account_id, message.conversation_id)
                conversation = unit.conversation(message.conversation_id, message.account_id)
                assert conversation is not None
                conversation.add_run(message.run_id)
            case ConversationDeleteRequested():
                self._delete_conversation(unit, message)
            case EvidenceGranted():
                unit.run(message.run_id).grant_evidence(
                    message.source_id, message.scope, message.owner_account_id, message.title)
            case NumericIssued():
                unit.run(message.run_id).issue_numeric(
                    message.handle_id, str(message.value), message.unit, message.version, message.source_id)
            case SourceRegistered():
                record = unit.source(message.source_id, create=True)
                assert record is not None
                record.register(message.scope, message.owner_account_id, message.title)
            case RunCompleted() | RunStopped() | RunFailed() | RunThrottled() | RunRejected():
                # Same partition as the run's proposals: everything before this is settled.
                unit.run(message.run_id).end(message.type.removeprefix("run."))
            case SourceRevoked() | SourceTombstoned():
                self._withdraw(unit, message)
            case _ if message.type in CANDIDATE_TYPES:
                return self._propose(unit, item, emit)
        return []

    def _propose(self, unit: UnitOfWork, item: Inbound, emit: EmitMany) -> list[tuple[Topic, Message]]:
        message = item.message
        run = unit.run(message.run_id)
        candidate = intake(message, envelope_size=item.size, policy=self.policy)
        if isinstance(candidate, IntakeRefusal):
            run.refuse_candidate(candidate)
            log.info("candidate refused at intake", run_id=message.run_id, reason=candidate.reason,
                     candidate_id=candidate.candidate_id)
            return []
        if run.settled(candidate.candidate_id) is not None:
            return []  # a redelivered candidate that was committed before: nothing new
        if unit.deleted_conversation(run):
            run.refuse_candidate(IntakeRefusal("conversation_deleted", "the run's conversation was deleted",
                                               message.type, message.run_id, candidate.candidate_id))
            return []
        standing = unit.standing(sources_to_check(candidate, run.facts()))
        if any(block.wants_modification for block in candidate.blocks):
            prepared = run.prepare(candidate, standing, self.policy)
            modifications = [d for d in prepared if isinstance(d, Commit) and d.is_modification]
            for decision in modifications:
                run.consume_preview_quota(candidate.candidate_id, decision.block_index, decision.block_id)
            if modifications:
                self._flush(unit)  # P13: the quota a preview is about to show is durable first
        decisions = run.settle(candidate, standing, self.policy)
        commits = [d for d in decisions if isinstance(d, Commit)]
        for decision in commits:
            for source_id in decision.block.effective_sources or ():
                record = unit.source(source_id, create=True)
                assert record is not None
                record.record_reliance(message.run_id)
        unit.candidates.append((message.run_id, candidate.candidate_id, [d.block_id for d in commits]))
        log.info("candidate settled", run_id=message.run_id, candidate_id=candidate.candidate_id,
                 decisions=[type(d).__name__ for d in decisions])
        return [(Topic.PUBLICATION, preview_for(message.run_id, d)) for d in commits]

    def _withdraw(self, unit: UnitOfWork, message: SourceRevoked | SourceTombstoned) -> None:
        record = unit.source(message.source_id, create=True)
        assert record is not None
        if isinstance(message, SourceRevoked):
            record.revoke(message.account_id, message.reason)
            cause: WithdrawalCause = "source_revoked"
        else:
            record.tombstone()
            cause = "source_tombstoned"
        account_id = message.account_id if isinstance(message, SourceRevoked) else None
        for run_id in list(record.dependents):
            withdrawn = unit.run(run_id).withdraw_for_source(message.source_id, cause, account_id)
            if withdrawn:
                log.info("blocks withdrawn", run_id=run_id, source_id=message.source_id, blocks=withdrawn)

    def _delete_conversation(self, unit: UnitOfWork, message: ConversationDeleteRequested) -> None:
        """X8: withdraw every block of the conversation's runs, then (after commit) destroy their keys."""
        conversation = unit.conversation(message.conversation_id, message.account_id)
        assert conversation is not None
        if conversation.account_id != message.account_id:
            log.warning("conversation delete refused: not the owner", conversation_id=message.conversation_id)
            return
        for run_id in conversation.runs:
            withdrawn = unit.run(run_id).withdraw_all("conversation_deleted")
            log.info("conversation deleted: blocks withdrawn", run_id=run_id, blocks=len(withdrawn))
            unit.shred.add(key_name_for(run_id, None))
        conversation.delete(message.reason)
        unit.shred.add(message.conversation_id)

    # --- committing -------------------------------------------------------------------

    def _bind_keys(self, unit: UnitOfWork) -> None:
        assert isinstance(self.mapper, SealingMapper)
        for run in unit.runs.values():
            self.mapper.bind(run.id, key_name_for(run.run_id, run.conversation_id))

    def _flush(self, unit: UnitOfWork) -> None:
        self._bind_keys(unit)
        processing = ProcessingEvent[uuid.UUID]()
        processing.collect_events(*unit.aggregates())
        self._record(processing)

    def _commit(self, unit: UnitOfWork, last: Inbound, emit: EmitMany) -> None:
        self._bind_keys(unit)
        processing = ProcessingEvent[uuid.UUID](tracking=last.tracking)
        processing.collect_events(*unit.aggregates())
        try:
            self._record(processing)
        except IntegrityError:
            if self.process_recorder.has_tracking_id(last.tracking.application_name, last.offset):
                log.info("poll already committed by another consumer", position=last.offset)
                self._positions.pop(last.tracking.application_name, None)
                return
            self._save_failed(unit, "integrity_error", emit)
            raise
        except (OperationalError, InterfaceError) as error:
            self._save_unknown(unit, last, error, emit)
        except PersistenceError as error:
            # Refused outright (privileges, data, internal error): nothing was committed.
            # Only the class name goes out: a database message may quote private values.
            self._save_failed(unit, type(error).__name__, emit)
            raise
        else:
            self._take_snapshots(processing)
        self._positions[last.tracking.application_name] = last.offset
        if unit.shred:
            for key_name in unit.shred:
                self.keyring.destroy(key_name)
            unit.forget()  # the cache must not keep serving bodies whose key is gone
            log.info("conversation keys destroyed", keys=len(unit.shred))

    def _save_failed(self, unit: UnitOfWork, error: str, emit: EmitMany) -> None:
        """P15: a refused commit leaves a failure fact. Recorded in the log when the log
        is writable (the relay then announces it, once, with a deterministic id);
        published straight to the topic only when it is not."""
        unit.forget()
        try:
            retry = UnitOfWork(self)
            for run_id, candidate_id, blocks in unit.candidates:
                retry.run(run_id).record_save_failure(candidate_id, error, blocks)
            self._flush(retry)
        except Exception:
            log.warning("could not record the save failure in the log; announcing it directly")
            self._emit_outcomes(unit, emit, lambda run_id, cid, blocks: AnswerSaveFailed(
                run_id=run_id, candidate_id=cid, block_ids=blocks, error=error))

    def _save_unknown(self, unit: UnitOfWork, last: Inbound, error: Exception, emit: EmitMany) -> None:
        log.warning("commit outcome unknown; reading back", error=type(error).__name__)
        self._emit_outcomes(unit, emit, lambda run_id, cid, blocks: AnswerSaveUnknown(
            run_id=run_id, candidate_id=cid, block_ids=blocks))
        unit.forget()
        if not self.process_recorder.has_tracking_id(last.tracking.application_name, last.offset):
            raise SaveUnconfirmed(f"poll ending at {last.tracking} is not in the log") from error
        for run_id, candidate_id, _ in unit.candidates:
            run = self.run(run_id)
            if run is None or run.settled(candidate_id) is None:
                raise SaveUnconfirmed(f"{candidate_id} not found on read-back") from error

    @staticmethod
    def _emit_outcomes(unit: UnitOfWork, emit: EmitMany, make: Callable[[str, str, list[str]], Message]) -> None:
        if unit.candidates:
            emit([(Topic.PUBLICATION, make(*entry)) for entry in unit.candidates])

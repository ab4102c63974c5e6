"""What one inbound message does to Publication's aggregates — pure, storage-agnostic.

The consumer hands :func:`handle` a decoded v1 message and a
:class:`~imprint.workspace.Workspace` (the aggregates of the current unit of
work). The handler for the message's type decides through the rule modules and
triggers events on the aggregates; it returns :class:`Effects` — what the unit
of work must do around its one transaction — and never saves, sends or sleeps.

========================================  ==================================================
``run.admitted``                          the run's account binding (X1), its conversation
``evidence.granted`` / ``numeric.issued``  the run's grants (P7) and numeric handles (P9)
``source.registered``                     the source registry (P7, P8)
``source.revoked`` / ``source.tombstoned``  withdrawal of every dependent block (P21)
``conversation.delete_requested``         withdrawal of every block, keys to destroy (X8)
``run.completed`` … ``run.rejected``       the run's end (same partition as its proposals); after
                                          ``run.stopped`` (X11) later proposals are refused
``run.lease_lapsed``                      X10: the Journal closed the run (its runtime was lost):
                                          the run ends, later proposals are refused
``answer.text`` / ``answer.part`` …       a candidate: intake (P1–P3), settlement (P4–P13, P18)
========================================  ==================================================

Every other type is not Publication's business (its offset is still tracked).

A modification's preview shows quota it has consumed, so that quota must be
durable *before* the preview goes out (P13): the proposal handler consumes the
quota, returns ``Effects(durable_first=True, then=settlement)``, and the unit
of work records what is pending so far, then applies ``then`` (the settlement
itself, decided once, by :meth:`PublicationRun.prepare`), then emits the
previews, then commits the rest with the Kafka position (P14, P15)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

from imprint.contracts.control import ConversationDeleteRequested, RunLeaseLapsed
from imprint.contracts.publication import AnswerPreview, WithdrawalCause
from imprint.contracts.runtime import (
    EvidenceGranted,
    NumericIssued,
    AnswerPart,
    AnswerText,
    ModelFrame,
    ModelReasoning,
    RouterResult,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunRejected,
    RunStopped,
    RunThrottled,
)
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.publication.announcements import preview_for
from imprint.publication.candidate import Candidate, IntakeRefusal, intake
from imprint.publication.conversations import ConversationRuns
from imprint.publication.policy import DEFAULT_POLICY, Policy
from imprint.publication.run import PublicationRun
from imprint.publication.settlement import BlockDecision, Commit, relied_sources
from imprint.publication.sources import SourceDependents, SourceFacts, SourceRecord, SourceStanding
from imprint.shredding import key_name_for
from imprint.workspace import Workspace

CANDIDATE_CLASSES = (AnswerText, AnswerPart, ModelFrame, ModelReasoning, RouterResult)
"""Messages that are offered to intake as candidates (all but the two entries are refused
there, P2: never answers, however answer-like their text)."""
CANDIDATE_TYPES = frozenset(str(cls.model_fields["type"].default) for cls in CANDIDATE_CLASSES)


@dataclass(frozen=True, slots=True)
class SettledCandidate:
    """A candidate this unit settled: what a save outcome (failed, unknown) names."""

    run_id: str
    candidate_id: str
    block_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Settlement:
    """A candidate's decisions, made once, still to be recorded on its run (and the
    sources it relies on): the part of a proposal that follows the quota flush."""

    run: PublicationRun
    candidate: Candidate
    decisions: tuple[BlockDecision, ...]

    shard: str = "0"

    def record(self, ws: Workspace) -> None:
        new_reliance = sorted(set(relied_sources(self.decisions)) - set(self.run.relied_on()))
        self.run.record_settlement(self.candidate.candidate_id, self.decisions)
        for source_id in new_reliance:
            dependents_of(ws, source_id, self.shard).record_reliance(self.run.run_id)


@dataclass(frozen=True, slots=True)
class Effects:
    """What a unit of work does around its transaction because of one message."""

    previews: tuple[AnswerPreview, ...] = ()
    """``answer.preview``\\ s to emit before the commit (P14)."""
    durable_first: bool = False
    """P13: record what is pending so far before ``then`` and before the previews."""
    then: Settlement | None = None
    """Applied after the durable-first flush (or at once when there is none)."""
    settled: tuple[SettledCandidate, ...] = ()
    shred: frozenset[str] = frozenset()
    """Key names to destroy once the unit is committed (X8)."""


NOTHING = Effects()

Handler = Callable[[Workspace, Any, "Context"], Effects]


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler knows about the message besides its body."""

    policy: Policy = DEFAULT_POLICY
    envelope_size: int = 0
    """Bytes of the original envelope (P3)."""
    shard: str = "0"
    """The shard of Publication's input the message came on — the runtime topic's partition, which
    one instance owns and on which all of a run's messages arrive: which :class:`SourceDependents` a
    run's reliance goes to."""


# ----------------------------------------------------------------------------- aggregates


def run_of(ws: Workspace, run_id: str) -> PublicationRun:
    run = ws.get(PublicationRun, PublicationRun.id_for(run_id))
    if run is None:
        run = PublicationRun(run_id)
        ws.add(run)
    return run


def source_record(ws: Workspace, source_id: str, *, create: bool) -> SourceRecord | None:
    record = ws.get(SourceRecord, SourceRecord.id_for(source_id))
    if record is None and create:
        record = SourceRecord(source_id)
        ws.add(record)
    return record


def dependents_of(ws: Workspace, source_id: str, shard: str) -> SourceDependents:
    """The shard's reliance record for a source; opening a new shard is noted on the source."""
    dependents = ws.get(SourceDependents, SourceDependents.id_for(source_id, shard))
    if dependents is None:
        dependents = SourceDependents(source_id, shard)
        ws.add(dependents)
        record = source_record(ws, source_id, create=True)
        assert record is not None
        record.open_shard(shard)
    return dependents


def conversation_of(ws: Workspace, conversation_id: str, account_id: str | None = None) -> ConversationRuns | None:
    """The conversation's run index; created only when ``account_id`` is given (at admission)."""
    conversation = ws.get(ConversationRuns, ConversationRuns.id_for(conversation_id))
    if conversation is None and account_id is not None:
        conversation = ConversationRuns(conversation_id, account_id)
        ws.add(conversation)
    return conversation


class _RegistryView(Mapping[str, SourceFacts]):
    """The registry facts of whichever sources a settlement reads, loaded on first read:
    the cost of a settlement follows what its candidate cites, not the run's history."""

    __slots__ = ("_ws", "_run", "_shard", "_seen")

    def __init__(self, ws: Workspace, run: PublicationRun, shard: str) -> None:
        self._ws = ws
        self._run = run
        self._shard = shard
        self._seen: dict[str, SourceFacts | None] = {}

    def __getitem__(self, source_id: str) -> SourceFacts:
        if source_id not in self._seen:
            record = source_record(self._ws, source_id, create=False)
            facts = None
            if record is not None:
                facts = self._run.noted_standing(record.standing())
                dependents = self._ws.get(SourceDependents, SourceDependents.id_for(source_id, self._shard))
                if dependents is not None:  # a revocation noted on this shard outranks an older copy of the source
                    facts = dependents.noted_standing(facts)
            self._seen[source_id] = facts
        facts = self._seen[source_id]
        if facts is None:
            raise KeyError(source_id)
        return facts

    def __iter__(self) -> Iterator[str]:
        return (k for k, v in self._seen.items() if v is not None)

    def __len__(self) -> int:
        return sum(1 for v in self._seen.values() if v is not None)


def standing_in(ws: Workspace, run: PublicationRun, shard: str) -> SourceStanding:
    """What ``run`` may know of the registry: the sources' records, and the revocations
    noted on its shard and on itself."""
    return SourceStanding(_RegistryView(ws, run, shard))


def aggregates_read(message: Any) -> tuple[uuid.UUID, ...]:
    """The aggregates :func:`handle` reads first for ``message``: its run, and an
    admission's conversation. A store may look them up together before the handlers run
    (a new run's aggregates are then known to be missing without a read each)."""
    run_id = getattr(message, "run_id", None)
    ids = [PublicationRun.id_for(run_id)] if isinstance(run_id, str) else []
    if isinstance(message, RunAdmitted):
        ids.append(ConversationRuns.id_for(message.conversation_id))
    return tuple(ids)


# ----------------------------------------------------------------------------- handlers


def admit(ws: Workspace, message: RunAdmitted, context: Context) -> Effects:
    run_of(ws, message.run_id).note_admission(message.account_id, message.conversation_id)
    conversation = conversation_of(ws, message.conversation_id, message.account_id)
    assert conversation is not None
    conversation.add_run(message.run_id)
    return NOTHING


def grant(ws: Workspace, message: EvidenceGranted, context: Context) -> Effects:
    run_of(ws, message.run_id).grant_evidence(message.source_id, message.scope, message.owner_account_id,
                                              message.title)
    return NOTHING


def issue_numeric(ws: Workspace, message: NumericIssued, context: Context) -> Effects:
    run_of(ws, message.run_id).issue_numeric(message.handle_id, str(message.value), message.unit,
                                             message.version, message.source_id)
    return NOTHING


def register_source(ws: Workspace, message: SourceRegistered, context: Context) -> Effects:
    record = source_record(ws, message.source_id, create=True)
    assert record is not None
    record.register(message.scope, message.owner_account_id, message.title)
    return NOTHING


def end_run(ws: Workspace, message: Any, context: Context) -> Effects:
    """Same partition as the run's proposals: everything before this is settled.

    X11: ``run.stopped`` is the stop boundary. The runtime sends it once its user's stop
    request cancelled the run's work, so every proposal before it on the run's partition is
    settled (committed blocks stay, P20) and every one after it is refused (``run_stopped``,
    recorded): nothing commits after a stop, so no preview shown before it can still become
    saved, and the blocks kept are exactly those committed before ``answer.settled``."""
    run_of(ws, message.run_id).end(message.type.removeprefix("run."))
    return NOTHING


def lose_run(ws: Workspace, message: RunLeaseLapsed, context: Context) -> Effects:
    """X10: the Journal closed the run ``failed`` when its runtime's lease lapsed, and announced
    it on ``imprint.control.v1``. The runtime will send no terminal event, so Publication ends
    the run here: ``Ended`` is relayed as ``answer.settled`` after every block committed so far,
    and Delivery, holding it and the Journal's ``run.closed``, ends the run's streams.

    This message and the run's proposals travel on different topics, so a proposal the
    runtime sent before it fell silent may be read after it. Such a proposal — and anything
    the runtime sends if it comes back — is refused (``run_lost``) and recorded, never
    committed: no block can follow ``answer.settled``, so ``done`` still never overtakes a
    committed block, and committed blocks stay (P20)."""
    run_of(ws, message.run_id).lose(message.reason)
    return NOTHING


def revoke_source(ws: Workspace, message: SourceRevoked, context: Context) -> Effects:
    """P21: the source is revoked (for one account, or for all), and every block relying on it is withdrawn."""
    record = source_record(ws, message.source_id, create=True)
    assert record is not None
    record.revoke(message.account_id, message.reason)
    return _withdraw_dependents(ws, record, message.source_id, "source_revoked", message.account_id)


def tombstone_source(ws: Workspace, message: SourceTombstoned, context: Context) -> Effects:
    """P21: the source is gone for good, and every block relying on it is withdrawn."""
    record = source_record(ws, message.source_id, create=True)
    assert record is not None
    record.tombstone()
    return _withdraw_dependents(ws, record, message.source_id, "source_tombstoned", None)


def _withdraw_dependents(ws: Workspace, record: SourceRecord, source_id: str, cause: WithdrawalCause,
                         account_id: str | None) -> Effects:
    """Every run relying on the source — on the record, and on each of its shards — has its
    dependent blocks withdrawn."""
    dependents = list(record.dependents)
    for shard in record.shards:
        reliance = ws.get(SourceDependents, SourceDependents.id_for(source_id, shard))
        if reliance is not None:
            reliance.note_standing(tombstoned=cause == "source_tombstoned", account_id=account_id)
            dependents.extend(reliance.dependents)
    for run_id in dict.fromkeys(dependents):
        run_of(ws, run_id).withdraw_for_source(source_id, cause, account_id)
    return NOTHING


def delete_conversation(ws: Workspace, message: ConversationDeleteRequested, context: Context) -> Effects:
    """X8: withdraw every block of the conversation's runs, then (after commit) destroy their keys.
    Only the conversation's owner may delete it; a request of another account changes nothing."""
    conversation = conversation_of(ws, message.conversation_id, message.account_id)
    assert conversation is not None
    if conversation.account_id != message.account_id:
        return NOTHING
    shred = {message.conversation_id}
    for run_id in conversation.runs:
        run_of(ws, run_id).delete_conversation(message.reason)
        shred.add(key_name_for(run_id))
    conversation.delete(message.reason)
    return Effects(shred=frozenset(shred))


def propose(ws: Workspace, message: Any, context: Context) -> Effects:
    """A candidate (entry A or B): intake, then one settlement, decided once."""
    run = run_of(ws, message.run_id)
    candidate = intake(message, envelope_size=context.envelope_size, policy=context.policy)
    if isinstance(candidate, IntakeRefusal):
        run.refuse_candidate(candidate)
        return NOTHING
    if run.settled(candidate.candidate_id) is not None:
        return NOTHING  # a redelivered candidate that was committed before: nothing new
    refusal = _not_answerable(ws, run, message, candidate)
    if refusal is not None:
        run.refuse_candidate(refusal)
        return NOTHING
    decisions = run.prepare(candidate, standing_in(ws, run, context.shard), context.policy)
    commits = [d for d in decisions if isinstance(d, Commit)]
    quota_used = [run.consume_preview_quota(candidate.candidate_id, d.block_index, d.block_id)
                  for d in commits if d.is_modification]
    return Effects(
        previews=tuple(preview_for(message.run_id, d) for d in commits),
        durable_first=any(quota_used),
        then=Settlement(run, candidate, decisions, context.shard),
        settled=(SettledCandidate(message.run_id, candidate.candidate_id, tuple(d.block_id for d in commits)),),
    )


def _not_answerable(ws: Workspace, run: PublicationRun, message: Any, candidate: Candidate) -> IntakeRefusal | None:
    """X1: identity before answer — a run Publication never saw admitted gets no block;
    X8: neither does a run whose conversation was deleted."""
    if run.deleted:
        return IntakeRefusal("conversation_deleted", "the run's conversation was deleted",
                             message.type, message.run_id, candidate.candidate_id)
    if run.ended == "stopped":
        return IntakeRefusal("run_stopped", "the run was stopped: nothing after its stop is settled",
                             message.type, message.run_id, candidate.candidate_id)
    if run.lost is not None:
        return IntakeRefusal("run_lost", "the Journal closed the run when its runtime's lease lapsed",
                             message.type, message.run_id, candidate.candidate_id)
    if run.account_id is None:
        return IntakeRefusal("run_not_admitted", "no run.admitted reached Publication for this run",
                             message.type, message.run_id, candidate.candidate_id)
    conversation = conversation_of(ws, run.conversation_id) if run.conversation_id else None
    if conversation is not None and conversation.deleted:
        return IntakeRefusal("conversation_deleted", "the run's conversation was deleted",
                             message.type, message.run_id, candidate.candidate_id)
    return None


HANDLERS: dict[type, Handler] = {
    RunAdmitted: admit,
    EvidenceGranted: grant,
    NumericIssued: issue_numeric,
    SourceRegistered: register_source,
    SourceRevoked: revoke_source,
    SourceTombstoned: tombstone_source,
    ConversationDeleteRequested: delete_conversation,
    RunCompleted: end_run,
    RunStopped: end_run,
    RunFailed: end_run,
    RunThrottled: end_run,
    RunRejected: end_run,
    RunLeaseLapsed: lose_run,
    **dict.fromkeys(CANDIDATE_CLASSES, propose),
}
"""One table: a reader finds what happens to a message by its type here."""


def handle(ws: Workspace, message: Any, context: Context = Context()) -> Effects:
    handler = HANDLERS.get(type(message))
    return NOTHING if handler is None else handler(ws, message, context)


def apply_all(ws: Workspace, offered: Iterable[tuple[Any, Context]]) -> Unit:
    """A poll's messages, in order, as one unit: each applied (:func:`apply_one`), the
    effects gathered for the unit of work to emit (previews, P14) and act on after its
    commit (keys to destroy)."""
    unit = Unit()
    for message, context in offered:
        unit.add(apply_one(ws, message, context))
    return unit


def apply_one(ws: Workspace, message: Any, context: Context = Context()) -> Effects:
    """One message of a unit: handled, a modification's quota made durable before its
    settlement and its preview (P13), the settlement recorded. A caller that looks at each
    message's effects on its own (a span per proposal) gathers them with :meth:`Unit.add`."""
    effects = handle(ws, message, context)
    if effects.durable_first:
        ws.flush()
    if effects.then is not None:
        effects.then.record(ws)
    return effects


@dataclass
class Unit:
    """The effects of every message of one unit of work, gathered in order."""

    previews: list[AnswerPreview] = field(default_factory=list)
    settled: list[SettledCandidate] = field(default_factory=list)
    shred: set[str] = field(default_factory=set)

    def add(self, effects: Effects) -> None:
        self.previews.extend(effects.previews)
        self.settled.extend(effects.settled)
        self.shred.update(effects.shred)

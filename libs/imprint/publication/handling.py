"""What one inbound message does to Publication's aggregates — pure, storage-agnostic.

The consumer's loop (``services.common.dispatch``) calls :func:`prepare` once per unit of
work — it wants every aggregate the unit's handlers will read
(:func:`~imprint.publication.aggregates.aggregates_read`), which the store then loads in one
go — then :func:`handle` with each decoded v1 message, a
:class:`~imprint.workspace.Workspace` (the aggregates of the current unit of work, held in
memory) and the message's :class:`Context`. The handler for the message's type
(:data:`HANDLERS`) decides through the rule modules and triggers events on the aggregates;
it returns :class:`Effects` — what the unit of work must do around its one transaction, and
what was decided — and never saves, sends or sleeps.

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
``run.ended_by_policy``                   X12: the Journal closed a run whose question never started
                                          (refused, cancelled, merged, steered): the run ends
``answer.text`` / ``answer.part`` …       a candidate: intake (P1–P3), settlement (P4–P13, P18)
========================================  ==================================================

Every other type is not Publication's business (its offset is still tracked).

A modification's preview shows quota it has consumed, so that quota must be
durable *before* the preview goes out (P13): the proposal handler consumes the
quota, returns ``Effects(durable_first=True, then=settlement)``, and :func:`handle` has the
workspace record what is pending so far, then applies ``then`` (the settlement itself,
decided once, by :meth:`PublicationRun.prepare`); the unit of work then emits the previews
and commits the rest with the Kafka position (P14, P15)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from imprint.contracts.control import ConversationDeleteRequested, RunLeaseLapsed
from imprint.contracts.conversation import RunEndedByPolicy
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
from imprint.publication.aggregates import (
    aggregates_read,
    cited_by,
    conversation_of,
    dependents_of,
    reliance_read,
    run_of,
    source_record,
    standing_in,
)
from imprint.publication.announcements import preview_for
from imprint.publication.candidate import Candidate, IntakeRefusal, intake
from imprint.publication.policy import DEFAULT_POLICY, Policy
from imprint.publication.run import PublicationRun
from imprint.publication.settlement import DECISION_WORDS, BlockDecision, Commit, relied_sources
from imprint.publication.sources import SourceDependents, SourceRecord
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
    decision: str | None = None
    """What a candidate came to, in fixed words (a span's ``decision``): its blocks' decisions
    (``commit``, ``unchanged``, ``rejected``, ``revision_rejected``, joined with ``+`` when they
    differ), ``refused`` (intake or answerability: P2, X1, X8, X10, X11) or ``settled_before``
    (a redelivered candidate). ``None``: the message is not a candidate."""


NOTHING = Effects()


@dataclass
class PollEffects:
    """The effects of every message of one unit of work, gathered in order by whoever runs
    the unit (a value it hands on, read by its fields): the previews to emit before the
    commit (P14), what a save outcome names (P15), the keys to destroy after the commit (X8)."""

    previews: list[AnswerPreview] = field(default_factory=list)
    settled: list[SettledCandidate] = field(default_factory=list)
    shred: set[str] = field(default_factory=set)


REFUSED = Effects(decision="refused")
SETTLED_BEFORE = Effects(decision="settled_before")

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


def end_by_policy(ws: Workspace, message: RunEndedByPolicy, context: Context) -> Effects:
    """X12: the Journal closed a run whose question never started under its conversation's policy
    (``rejected``, or ``stopped``: cancelled, merged, steered). Its runtime sends no terminal event,
    so Publication ends the run here — ``answer.settled`` follows, and Delivery, holding it and the
    Journal's ``run.closed``, ends the run's streams. A ``stopped`` one refuses what comes after
    (``run_stopped``), as after a user's stop."""
    run_of(ws, message.run_id).end(message.state)
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
        return REFUSED
    if run.settled(candidate.candidate_id) is not None:
        return SETTLED_BEFORE  # a redelivered candidate that was committed before: nothing new
    refusal = _not_answerable(ws, run, message, candidate)
    if refusal is not None:
        run.refuse_candidate(refusal)
        return REFUSED
    decisions = run.prepare(candidate, standing_in(ws, run, context.shard), context.policy)
    commits = [d for d in decisions if isinstance(d, Commit)]
    quota_used = [run.consume_preview_quota(candidate.candidate_id, d.block_index, d.block_id)
                  for d in commits if d.is_modification]
    return Effects(
        previews=tuple(preview_for(message.run_id, d) for d in commits),
        durable_first=any(quota_used),
        then=Settlement(run, candidate, decisions, context.shard),
        settled=(SettledCandidate(message.run_id, candidate.candidate_id, tuple(d.block_id for d in commits)),),
        decision="+".join(sorted({DECISION_WORDS[type(d)] for d in decisions})) or "none",
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
    RunEndedByPolicy: end_by_policy,
    **dict.fromkeys(CANDIDATE_CLASSES, propose),
}
"""One table: a reader finds what happens to a message by its type here."""


def prepare(ws: Workspace, messages: Sequence[Any]) -> Sequence[Any]:
    """Before a unit's messages are handled, in their order: every aggregate their
    handlers read, wanted together (:func:`aggregates_read`; a cited source's reliance on
    each of the unit's shards if the store holds it, :func:`reliance_read`), for the unit's
    runner to load in one go before the first handler."""
    for message in messages:
        cited = cited_by(message)
        ws.want(aggregates_read(message, cited))
        if cited:
            ws.want(reliance_read(cited, ws.shards), if_held=True)
    return messages


def handle(ws: Workspace, message: Any, context: Context = Context()) -> Effects:
    """One message of a unit: its handler (:data:`HANDLERS`; any other type changes nothing),
    a modification's quota made durable before its settlement and its preview (P13), the
    settlement recorded."""
    handler = HANDLERS.get(type(message))
    if handler is None:
        return NOTHING
    effects = handler(ws, message, context)
    if effects.durable_first:
        ws.flush()
    if effects.then is not None:
        effects.then.record(ws)
    return effects

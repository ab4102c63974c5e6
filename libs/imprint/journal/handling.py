"""What one inbound message does to the journal's aggregates — pure, storage-agnostic.

The consumer's loop (``services.common.dispatch``) calls :func:`prepare` once per unit of
work, then :func:`handle` with each decoded v1 message, a :class:`Workspace` (aggregates
loaded for the current unit of work) and the message's :class:`Context` (the unit's keys,
:class:`imprint.journal.keys.JournalKeys`, and the runtime shard it came on). The handler
decides through the rule modules and triggers events on the aggregates; the caller records
every pending event of the workspace in one transaction, with the Kafka tracking record.
Each handler returns :class:`Effects`: updates of the mutable message → execution index
(:class:`IndexIntent`) and lease changes (X10) to act on *after* that transaction commits.

Side effect before commit, on purpose: deletion destroys the conversation key
first (X8, :mod:`imprint.journal.keys`).

Which message touches what:

=========================  ===========================================================
``run.admitted``           execution (X1 request), conversation (binding), QCS identity; the run
                           held in its shard's lease record (X10)
``run.queued`` … ``run.rejected`` / ``run.completed``   execution lifecycle (X2, X4); a run that
                           closed released from its shard's lease record (X10)
``run.stage``              execution progress (free-text detail sealed)
``evidence.granted``       execution grant + source link (X7 serialization)
``tool.receipt``           execution receipt (P19)
``run.heartbeat``          nothing while the run is open (X10: it renews the lease in memory);
                           refused and recorded once the run is closed
``run.cancel_requested``   the user's stop request on the open execution (X11); nothing once it ended,
                           but a ``run.stopped`` that names it records it first
``answer.published`` / ``answer.unchanged``   execution effect observed (P19, P20)
``source.tombstoned``      source tombstone + redaction of every linked execution (X7)
``conversation.delete_requested``   key destruction, conversation tombstone, executions erased (X8)
``question.cancel_requested`` / ``question.send_now_requested``   the user's request on a queued
                           question of the conversation (X12, :mod:`imprint.journal.queue_handling`)
=========================  ===========================================================

X12: an admission meets its conversation's queue (:func:`admit`); the queue's other rows are in
:mod:`imprint.journal.queue_handling` (a lifecycle message that closes a run of the queue starts
the next, a ``run.started`` of a question still queued is refused).

The table is :data:`HANDLERS`, at the end: one handler per message class, dispatched
by the message's type; a lifecycle row also keeps the run's lease fact (:func:`held`).
Every other type is not the journal's business and is ignored (its offset is still tracked); :data:`APPLIED_TYPES`, read off the table, lets the
consumer leave those undecoded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested
from imprint.contracts.conversation import QuestionCancelRequested, QuestionSendNowRequested
from imprint.contracts.publication import AnswerPublished, AnswerUnchanged
from imprint.contracts.runtime import (
    LIFECYCLE_MESSAGES,
    EvidenceGranted,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunHeartbeat,
    RunRejected,
    RunStage,
    RunStarted,
    RunStopped,
    ToolReceipt,
)
from imprint.contracts.sources import SourceTombstoned
from imprint.journal import ids, leases, queueing
from imprint.journal.conditions import QcsIdentity, check_qcs, condition_sources, conditions_json, normalize_question
from imprint.journal.conversation import Conversation
from imprint.journal.deletion import delete_conversation
from imprint.journal.effects import NOTHING, Context, Effects, Handler, IndexIntent, execution_of, source_links_of
from imprint.journal.execution import AnswerExecution
from imprint.journal.records import (
    F_ANSWER,
    F_CONDITIONS,
    F_NORMALIZED,
    F_QUESTION,
    F_REASON,
    F_STAGE_DETAIL,
    AnswerExecutionRequest,
    CompletionRecord,
    FrozenItem,
    excerpt_field,
    grant_title_field,
    title_field,
)
from imprint.journal.keys import JournalKeys
from imprint.journal.lifecycle import MESSAGE_TARGETS, State
from imprint.journal.queue_handling import ending, in_turn, question_request
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.shredding import KeyDestroyed
from imprint.workspace import MemoryWorkspace, Workspace


F_FINGERPRINT = "completion.fingerprint"


def prepare(ws: Workspace, messages: Sequence[Any]) -> Sequence[Any]:
    """Before a unit's messages are handled: nothing to look up (the keys its admissions seal
    under were read with its context, :meth:`JournalKeys.scoped`); they apply in their order."""
    return messages


def handle(ws: Workspace, message: Any, context: Context) -> Effects:
    """Run the handler of ``message``'s type (:data:`HANDLERS`); any other type changes nothing."""
    handler = HANDLERS.get(type(message))
    return NOTHING if handler is None else handler(ws, message, context)


# -- helpers ----------------------------------------------------------------------------------------


def _with_sealed(ws: Workspace, m: Any, field: str, text: str | None, keys: JournalKeys,
                 record: Callable[[AnswerExecution, str, str | None], None]) -> None:
    """The path of a run message that may carry one private ``text``: an exact
    redelivery changes nothing (X2); the text is sealed as ``field`` when there is one
    and the execution may hold it (a refusal to seal is recorded instead, and ends
    here); then ``record(execution, event_id, sealed text or None)``."""
    if (fresh := _unseen(ws, m)) is None:
        return
    ex, eid = fresh
    sealed = None
    if text and _ready(ex, m.type) is None:
        try:
            sealed = keys.seal(ex, field, text)
        except Refusal as r:
            ex.refuse(eid, m.type, r)
            return
    record(ex, eid, sealed)


def _unseen(ws: Workspace, m: Any, refused: Callable[[AnswerExecution, str], Refusal | None] | None = None
            ) -> tuple[AnswerExecution, str] | None:
    """The execution run message ``m`` names, with the message's id — or ``None`` when the
    execution has seen that id already (an exact redelivery changes nothing, X2), or when
    ``refused`` names a refusal that applies before anything else (it is recorded)."""
    eid = str(m.event_id)
    ex = execution_of(ws, m.run_id)
    if ex.has_seen(eid):
        return None
    if refused is not None and (r := refused(ex, m.type)) is not None:
        ex.refuse(eid, m.type, r)
        return None
    return ex, eid


def _admitted_already(ex: AnswerExecution, message_type: str) -> Refusal | None:
    """The refusal of a second admission (X1), or of one into a deleted conversation (X8)."""
    if ex.erased:
        return Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted")
    if ex.state is not None:
        return Refusal(RefusalCode.DUPLICATE_ADMISSION, f"already {ex.state.value}")
    return None


def _ready(ex: AnswerExecution, message_type: str) -> Refusal | None:
    """The refusal that applies before any private field is sealed, if any."""
    if ex.erased:
        return Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted")
    if ex.request is None:
        return Refusal(RefusalCode.NOT_ADMITTED, f"{message_type} before admission")
    return None


# -- X1 / X3: admission ---------------------------------------------------------------------

def admit(ws: Workspace, m: RunAdmitted, context: Context) -> Effects:
    if (fresh := _unseen(ws, m, _admitted_already)) is None:
        return NOTHING
    ex, eid = fresh
    keys = context.keys
    conv = ws.get(Conversation, ids.conversation_id(m.conversation_id))
    existing = ws.get(QcsIdentity, ids.qcs_id(m.qcs.qcs_id))
    parent = ws.get(QcsIdentity, ids.qcs_id(m.qcs.inherits_from)) if m.qcs.inherits_from else None
    try:
        if conv is not None:
            conv.check_admission(m.account_id)
        if keys.keyring.is_destroyed(m.conversation_id):
            raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed")
        check_qcs(
            m.qcs,
            run_id=m.run_id,
            conversation_id=m.conversation_id,
            existing=existing.binding() if existing else None,
            parent=parent.binding() if parent else None,
        )
        cid, rid = m.conversation_id, m.run_id
        try:
            request = AnswerExecutionRequest(
                run_id=rid,
                account_id=m.account_id,
                conversation_id=cid,
                message_id=m.message_id,
                question=keys.sealer.seal(cid, rid, F_QUESTION, m.question),
                normalized_question=keys.sealer.seal(cid, rid, F_NORMALIZED, normalize_question(m.question)),
                qcs_id=m.qcs.qcs_id,
                inherits_from=m.qcs.inherits_from,
                conditions=keys.sealer.seal(cid, rid, F_CONDITIONS, conditions_json(m.qcs)),
                condition_count=len(m.qcs.conditions),
                condition_sources=condition_sources(m.qcs),
                admission_event_id=eid,
                requested_at=m.occurred_at.isoformat(),
            )
        except KeyDestroyed as e:
            raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e
    except Refusal as r:
        ex.refuse(eid, m.type, r)
        return NOTHING
    if not ex.admit(eid, request):
        return NOTHING
    if conv is None:
        conv = Conversation(m.conversation_id, m.account_id)
        ws.add(conv)
    conv.bind(eid, m.run_id, m.message_id, m.qcs.qcs_id)
    if existing is None:
        ws.add(QcsIdentity.register(m.qcs, m.run_id, m.conversation_id))
    queueing.admitted(ws, conv, ex, eid, m.policy or context.policy)  # X12
    return Effects(index=(IndexIntent("point", m.conversation_id, m.message_id, m.run_id),))

# -- X2: lifecycle --------------------------------------------------------------------------

def transition(ws: Workspace, m: Any, context: Context) -> Effects:
    target = MESSAGE_TARGETS[m.type]
    reason_text = m.reason if isinstance(m, (RunFailed, RunRejected)) and m.reason else None

    def record(ex: AnswerExecution, eid: str, reason: str | None) -> None:
        if isinstance(m, RunStopped) and m.cancel_request_id is not None and ex.account_id is not None:
            # X11: the stop answers this request, which travels on another topic and may come
            # later: the request is recorded now, by its own id (its late copy is a redelivery).
            ex.request_stop(str(m.cancel_request_id), ex.account_id)
        ex.transition(eid, m.type, target, reason)

    _with_sealed(ws, m, F_REASON, reason_text, context.keys, record)
    return NOTHING

# -- X4 / X7: completion ----------------------------------------------------------------------

def complete(ws: Workspace, m: RunCompleted, context: Context) -> Effects:
    if (fresh := _unseen(ws, m, _ready)) is None:
        return NOTHING
    ex, eid = fresh
    assert ex.request is not None
    keys = context.keys
    try:
        items = tuple(
            FrozenItem(
                i.source_id,
                keys.seal(ex, title_field(n), i.title) if i.title else None,
                keys.seal(ex, excerpt_field(n), i.excerpt) if i.excerpt else None,
            )
            for n, i in enumerate(m.evidence.items)
        )
        canonical = json.dumps(
            {
                "outcome": m.outcome,
                "answer_text": m.answer_text,
                "items": [[i.source_id, i.title, i.excerpt] for i in m.evidence.items],
                "snapshot_id": m.evidence.snapshot_id,
                "knowledge_version": m.evidence.knowledge_version,
            },
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )
        try:
            fingerprint = keys.sealer.fingerprint(ex.request.conversation_id, ex.run_id, F_FINGERPRINT, canonical)
        except KeyDestroyed as e:
            raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e
        record = CompletionRecord(
            outcome=m.outcome,
            answer_text=keys.seal(ex, F_ANSWER, m.answer_text),
            items=items,
            snapshot_id=m.evidence.snapshot_id,
            knowledge_version=m.evidence.knowledge_version,
            fingerprint=fingerprint,
            event_id=eid,
        )
    except Refusal as r:
        ex.refuse(eid, m.type, r)
        return NOTHING
    standings = {sid: source_links_of(ws, sid) for sid in dict.fromkeys(record.source_ids)}
    tombstoned = frozenset(sid for sid, s in standings.items() if s.tombstoned)
    if ex.complete(eid, record, tombstoned):
        for s in standings.values():
            s.link(ex.run_id)  # writes the source: serializes with a concurrent tombstone (X7)
    return NOTHING


# -- progress, grants, receipts, effects ----------------------------------------------------

def stage(ws: Workspace, m: RunStage, context: Context) -> Effects:
    _with_sealed(ws, m, F_STAGE_DETAIL, m.detail, context.keys,
                 lambda ex, eid, detail: ex.report_stage(eid, m.stage, detail))
    return NOTHING

def grant(ws: Workspace, m: EvidenceGranted, context: Context) -> Effects:
    def record(ex: AnswerExecution, eid: str, title: str | None) -> None:
        if ex.grant(eid, m.source_id, m.scope, m.owner_account_id, title):
            s = source_links_of(ws, m.source_id)
            s.link(ex.run_id)
            if s.tombstoned:
                ex.redact(m.source_id)

    _with_sealed(ws, m, grant_title_field(str(m.event_id)), m.title, context.keys, record)
    return NOTHING

def receipt(ws: Workspace, m: ToolReceipt, context: Context) -> Effects:
    ex = execution_of(ws, m.run_id)
    ex.record_receipt(str(m.event_id), m.tool_call_id, m.status)
    return NOTHING

def published(ws: Workspace, m: AnswerPublished, context: Context) -> Effects:
    ex = execution_of(ws, m.run_id)
    b = m.block
    ex.observe_effect(str(m.event_id), "published", b.candidate_id, b.block_id, b.revision, b.body_sha256, b.receipt.receipt_id, b.receipt.log_position)
    return NOTHING

def unchanged(ws: Workspace, m: AnswerUnchanged, context: Context) -> Effects:
    ex = execution_of(ws, m.run_id)
    ex.observe_effect(str(m.event_id), "unchanged", m.candidate_id, m.block_id, m.revision, None, m.receipt.receipt_id, m.receipt.log_position)
    return NOTHING

# -- X10: run leases ------------------------------------------------------------------------

def heartbeat(ws: Workspace, m: RunHeartbeat, context: Context) -> Effects:
    ex = execution_of(ws, m.run_id)
    ex.beat(str(m.event_id))
    return NOTHING

# -- X11: stop ------------------------------------------------------------------------------

def cancel_requested(ws: Workspace, m: RunCancelRequested, context: Context) -> Effects:
    ex = execution_of(ws, m.run_id)
    ex.request_stop(str(m.event_id), m.account_id)
    return NOTHING

# -- X7: tombstones -------------------------------------------------------------------------

def tombstone(ws: Workspace, m: SourceTombstoned, context: Context) -> Effects:
    s = source_links_of(ws, m.source_id)
    s.tombstone(str(m.event_id))
    for run_id in s.run_ids:
        ex = execution_of(ws, run_id, create=False)
        if ex is not None:
            ex.redact(m.source_id)
    return NOTHING


# -- X8: deletion ---------------------------------------------------------------------------

def delete_requested(ws: Workspace, m: ConversationDeleteRequested, context: Context) -> Effects:
    return delete_conversation(ws, context.keys, m.conversation_id, m.account_id, str(m.event_id), m.reason,
                               m.type)


def held(handler: Handler) -> Handler:
    """A lifecycle message's row: its handler, then the run's lease fact kept in its shard's
    record in the same unit of work (X10: a run that became open is held, one that closed is
    released)."""

    def keeping(ws: Workspace, message: Any, context: Context) -> Effects:
        effects = handler(ws, message, context)
        changes = leases.keep(ws, context.shard, message)
        return effects if not changes else Effects(effects.index, effects.leases + tuple(changes))

    return keeping


HANDLERS: dict[type, Handler] = {
    # admission, start, completion: below
    **{lifecycle: held(ending(transition)) for lifecycle in LIFECYCLE_MESSAGES},
    RunAdmitted: held(admit),
    RunStarted: held(in_turn(transition)),
    RunCompleted: held(ending(complete)),
    RunStage: stage,
    EvidenceGranted: grant,
    ToolReceipt: receipt,
    AnswerPublished: published,
    AnswerUnchanged: unchanged,
    SourceTombstoned: tombstone,
    ConversationDeleteRequested: delete_requested,
    RunHeartbeat: heartbeat,
    RunCancelRequested: cancel_requested,
    QuestionCancelRequested: question_request,
    QuestionSendNowRequested: question_request,
}
"""One table: a reader finds what happens to a message by its type here."""

APPLIED_TYPES: frozenset[str] = frozenset(message_class.model_fields["type"].default for message_class in HANDLERS)
"""Every message type :func:`handle` acts on. Any other message of the journal's
topics (a proposal, a preview, a refusal…) changes nothing here, so its consumer may
acknowledge it without decoding it (the Publication and Delivery consumers, which apply
them, refuse what is malformed)."""


__all__ = ["Context", "Effects", "HANDLERS", "IndexIntent", "MemoryWorkspace", "Workspace", "handle", "prepare",
           "State"]

"""What one inbound message does to the journal's aggregates — pure, storage-agnostic.

The application hands :meth:`JournalHandling.apply` a decoded v1 message and a
:class:`Workspace` (aggregates loaded for the current unit of work). JournalHandling
decides through the rule modules and triggers events on the aggregates; the
caller records every pending event of the workspace in one transaction, with the
Kafka tracking record. JournalHandling returns :class:`IndexIntent`\\ s — updates of the
mutable message → execution index to perform *after* that transaction commits.

Side effect before commit, on purpose: deletion destroys the conversation key
first (X8). If the transaction then fails, the key is already gone — the
conversation is unreadable, never half-readable — and the redelivered request
finishes the tombstone.

Which message touches what:

=========================  ===========================================================
``run.admitted``           execution (X1 request), conversation (binding), QCS identity
``run.queued`` … ``run.rejected`` / ``run.completed``   execution lifecycle (X2, X4)
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
=========================  ===========================================================

The table is :data:`HANDLERS`, at the end: one handler per message class, dispatched
by the message's type. Every other type is not the journal's business and is ignored
(its offset is still tracked); :data:`APPLIED_TYPES`, read off the table, lets the
consumer leave those undecoded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal
from uuid import uuid5


from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested
from imprint.contracts.publication import AnswerPublished, AnswerUnchanged
from imprint.contracts.runtime import (
    EvidenceGranted,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunHeartbeat,
    RunQueued,
    RunRejected,
    RunStage,
    RunStarted,
    RunStopped,
    RunThrottled,
    ToolReceipt,
)
from imprint.contracts.sources import SourceTombstoned
from imprint.journal import ids
from imprint.journal.conditions import QcsIdentity, check_qcs, condition_sources, conditions_json, normalize_question
from imprint.journal.conversation import Conversation, DeletionReason
from imprint.journal.execution import (
    F_ANSWER,
    F_CONDITIONS,
    F_NORMALIZED,
    F_QUESTION,
    F_REASON,
    F_STAGE_DETAIL,
    AnswerExecution,
    AnswerExecutionRequest,
    CompletionRecord,
    FrozenItem,
    excerpt_field,
    grant_title_field,
    title_field,
)
from imprint.journal.lifecycle import MESSAGE_TARGETS, State
from imprint.journal.redaction import SourceLinks
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.shredding import FieldSealer, KeyDestroyed, Keyring, ScopedKeyring
from imprint.workspace import MemoryWorkspace, Workspace


F_FINGERPRINT = "completion.fingerprint"

@dataclass(frozen=True)
class IndexIntent:
    kind: Literal["point", "drop"]
    conversation_id: str
    message_id: str | None = None
    run_id: str | None = None


class JournalHandling:
    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self.sealer = FieldSealer(keyring)

    def scoped(self) -> JournalHandling:
        """A handling for one unit of work: conversation keys are fetched once (see ``ScopedKeyring``)."""
        base = self.keyring.inner if isinstance(self.keyring, ScopedKeyring) else self.keyring
        return JournalHandling(ScopedKeyring(base))

    def prepare(self, messages: Iterable[Any]) -> None:
        """Before a unit's messages are handled: the keys its admissions will seal under,
        created where missing and read, all at once (a scoped handling over a keyring that
        reads and creates many keys at once, :class:`imprint.shredding.BulkKeyring`)."""
        if isinstance(self.keyring, ScopedKeyring):
            self.keyring.prepare(m.conversation_id for m in messages if isinstance(m, RunAdmitted))

    # -- dispatch -------------------------------------------------------------------------------

    def apply(self, ws: Workspace, message: Any) -> list[IndexIntent]:
        """Run the handler of ``message``'s type (:data:`HANDLERS`); any other type changes nothing."""
        handler = HANDLERS.get(type(message))
        if handler is None:
            return []
        return handler(self, ws, message) or []

    # -- helpers --------------------------------------------------------------------------------

    def _execution(self, ws: Workspace, run_id: str, create: bool = True) -> AnswerExecution | None:
        ex = ws.get(AnswerExecution, ids.execution_id(run_id))
        if ex is None and create:
            ex = AnswerExecution.open(run_id)
            ws.add(ex)
        return ex

    def _source(self, ws: Workspace, source_id: str) -> SourceLinks:
        s = ws.get(SourceLinks, ids.source_id(source_id))
        if s is None:
            s = SourceLinks.note(source_id)
            ws.add(s)
        return s

    def _seal(self, ex: AnswerExecution, field: str, text: str | None) -> str | None:
        """Seal a private field of an admitted execution; ``KeyDestroyed`` becomes a refusal."""
        if text is None:
            return None
        assert ex.request is not None
        try:
            return self.sealer.seal(ex.request.conversation_id, ex.run_id, field, text)
        except KeyDestroyed as e:
            raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e

    def _with_sealed(self, ws: Workspace, m: Any, field: str, text: str | None,
                     record: Callable[[AnswerExecution, str, str | None], None]) -> None:
        """The path of a run message that may carry one private ``text``: an exact
        redelivery changes nothing (X2); the text is sealed as ``field`` when there is one
        and the execution may hold it (a refusal to seal is recorded instead, and ends
        here); then ``record(execution, event_id, sealed text or None)``."""
        eid = str(m.event_id)
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        if ex.has_seen(eid):
            return
        sealed = None
        if text and self._ready(ex, m.type) is None:
            try:
                sealed = self._seal(ex, field, text)
            except Refusal as r:
                ex.refuse(eid, m.type, r)
                return
        record(ex, eid, sealed)

    @staticmethod
    def _ready(ex: AnswerExecution, message_type: str) -> Refusal | None:
        """The refusal that applies before any private field is sealed, if any."""
        if ex.erased:
            return Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted")
        if ex.request is None:
            return Refusal(RefusalCode.NOT_ADMITTED, f"{message_type} before admission")
        return None

    # -- X1 / X3: admission ---------------------------------------------------------------------

    def admit(self, ws: Workspace, m: RunAdmitted) -> list[IndexIntent]:
        eid = str(m.event_id)
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        if ex.has_seen(eid):
            return []
        if ex.erased:
            ex.refuse(eid, m.type, Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted"))
            return []
        if ex.state is not None:
            ex.refuse(eid, m.type, Refusal(RefusalCode.DUPLICATE_ADMISSION, f"already {ex.state.value}"))
            return []
        conv = ws.get(Conversation, ids.conversation_id(m.conversation_id))
        existing = ws.get(QcsIdentity, ids.qcs_id(m.qcs.qcs_id))
        parent = ws.get(QcsIdentity, ids.qcs_id(m.qcs.inherits_from)) if m.qcs.inherits_from else None
        try:
            if conv is not None:
                conv.check_admission(m.account_id)
            if self.keyring.is_destroyed(m.conversation_id):
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
                    question=self.sealer.seal(cid, rid, F_QUESTION, m.question),
                    normalized_question=self.sealer.seal(cid, rid, F_NORMALIZED, normalize_question(m.question)),
                    qcs_id=m.qcs.qcs_id,
                    inherits_from=m.qcs.inherits_from,
                    conditions=self.sealer.seal(cid, rid, F_CONDITIONS, conditions_json(m.qcs)),
                    condition_count=len(m.qcs.conditions),
                    condition_sources=condition_sources(m.qcs),
                    admission_event_id=eid,
                    requested_at=m.occurred_at.isoformat(),
                )
            except KeyDestroyed as e:
                raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e
        except Refusal as r:
            ex.refuse(eid, m.type, r)
            return []
        if not ex.admit(eid, request):
            return []
        if conv is None:
            conv = Conversation.start(m.conversation_id, m.account_id)
            ws.add(conv)
        conv.bind(eid, m.run_id, m.message_id, m.qcs.qcs_id)
        if existing is None:
            ws.add(QcsIdentity.register(m.qcs, m.run_id, m.conversation_id))
        return [IndexIntent("point", m.conversation_id, m.message_id, m.run_id)]

    # -- X2: lifecycle --------------------------------------------------------------------------

    def transition(self, ws: Workspace, m: Any) -> None:
        target = MESSAGE_TARGETS[m.type]
        reason_text = m.reason if isinstance(m, (RunFailed, RunRejected)) and m.reason else None

        def record(ex: AnswerExecution, eid: str, reason: str | None) -> None:
            if isinstance(m, RunStopped) and m.cancel_request_id is not None and ex.account_id is not None:
                # X11: the stop answers this request, which travels on another topic and may come
                # later: the request is recorded now, by its own id (its late copy is a redelivery).
                ex.request_stop(str(m.cancel_request_id), ex.account_id)
            ex.transition(eid, m.type, target, reason)

        self._with_sealed(ws, m, F_REASON, reason_text, record)

    # -- X4 / X7: completion ----------------------------------------------------------------------

    def complete(self, ws: Workspace, m: RunCompleted) -> None:
        eid = str(m.event_id)
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        if ex.has_seen(eid):
            return
        if (r := self._ready(ex, m.type)) is not None:
            ex.refuse(eid, m.type, r)
            return
        assert ex.request is not None
        try:
            items = tuple(
                FrozenItem(
                    i.source_id,
                    self._seal(ex, title_field(n), i.title) if i.title else None,
                    self._seal(ex, excerpt_field(n), i.excerpt) if i.excerpt else None,
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
                fingerprint = self.sealer.fingerprint(ex.request.conversation_id, ex.run_id, F_FINGERPRINT, canonical)
            except KeyDestroyed as e:
                raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e
            record = CompletionRecord(
                outcome=m.outcome,
                answer_text=self._seal(ex, F_ANSWER, m.answer_text),
                items=items,
                snapshot_id=m.evidence.snapshot_id,
                knowledge_version=m.evidence.knowledge_version,
                fingerprint=fingerprint,
                event_id=eid,
            )
        except Refusal as r:
            ex.refuse(eid, m.type, r)
            return
        standings = {sid: self._source(ws, sid) for sid in dict.fromkeys(record.source_ids)}
        tombstoned = frozenset(sid for sid, s in standings.items() if s.tombstoned)
        if ex.complete(eid, record, tombstoned):
            for s in standings.values():
                s.link(ex.run_id)  # writes the source: serializes with a concurrent tombstone (X7)

    # -- progress, grants, receipts, effects ----------------------------------------------------

    def stage(self, ws: Workspace, m: RunStage) -> None:
        self._with_sealed(ws, m, F_STAGE_DETAIL, m.detail,
                          lambda ex, eid, detail: ex.report_stage(eid, m.stage, detail))

    def grant(self, ws: Workspace, m: EvidenceGranted) -> None:
        def record(ex: AnswerExecution, eid: str, title: str | None) -> None:
            if ex.grant(eid, m.source_id, m.scope, m.owner_account_id, title):
                s = self._source(ws, m.source_id)
                s.link(ex.run_id)
                if s.tombstoned:
                    ex.redact(m.source_id)

        self._with_sealed(ws, m, grant_title_field(str(m.event_id)), m.title, record)

    def receipt(self, ws: Workspace, m: ToolReceipt) -> None:
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        ex.record_receipt(str(m.event_id), m.tool_call_id, m.status)

    def published(self, ws: Workspace, m: AnswerPublished) -> None:
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        b = m.block
        ex.observe_effect(str(m.event_id), "published", b.candidate_id, b.block_id, b.revision, b.body_sha256, b.receipt.receipt_id, b.receipt.log_position)

    def unchanged(self, ws: Workspace, m: AnswerUnchanged) -> None:
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        ex.observe_effect(str(m.event_id), "unchanged", m.candidate_id, m.block_id, m.revision, None, m.receipt.receipt_id, m.receipt.log_position)

    # -- X10: run leases ------------------------------------------------------------------------

    def heartbeat(self, ws: Workspace, m: RunHeartbeat) -> None:
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        ex.beat(str(m.event_id))

    # -- X11: stop ------------------------------------------------------------------------------

    def cancel_requested(self, ws: Workspace, m: RunCancelRequested) -> None:
        ex = self._execution(ws, m.run_id)
        assert ex is not None
        ex.request_stop(str(m.event_id), m.account_id)

    # -- X7: tombstones -------------------------------------------------------------------------

    def tombstone(self, ws: Workspace, m: SourceTombstoned) -> None:
        s = self._source(ws, m.source_id)
        s.tombstone(str(m.event_id))
        for run_id in s.run_ids:
            ex = self._execution(ws, run_id, create=False)
            if ex is not None:
                ex.redact(m.source_id)

    # -- X8: deletion ---------------------------------------------------------------------------

    def delete_requested(self, ws: Workspace, m: ConversationDeleteRequested) -> list[IndexIntent]:
        return self.delete_conversation(ws, m.conversation_id, m.account_id, str(m.event_id), m.reason, m.type)

    def delete_conversation(
        self,
        ws: Workspace,
        conversation_id: str,
        account_id: str,
        event_id: str,
        reason: DeletionReason,
        message_type: str = "conversation.delete_requested",
    ) -> list[IndexIntent]:
        conv = ws.get(Conversation, ids.conversation_id(conversation_id))
        if conv is not None and event_id in conv.processed:
            return []
        if conv is not None and conv.account_id != account_id:
            conv.refuse(event_id, message_type, Refusal(RefusalCode.ACCOUNT_MISMATCH, "conversation belongs to another account"))
            return []
        self.keyring.destroy(conversation_id)  # first: from here on nothing of it can be read or sealed
        if conv is None:
            conv = Conversation.start(conversation_id, account_id)
            ws.add(conv)
        conv.delete(event_id, reason)
        for run_id in dict.fromkeys(conv.run_ids):
            ex = self._execution(ws, run_id, create=False)
            if ex is not None:
                ex.erase(event_id, reason)
        return [IndexIntent("drop", conversation_id)]


Handler = Callable[[JournalHandling, Workspace, Any], list[IndexIntent] | None]
"""An :class:`JournalHandling` method for one message class: it triggers events on the workspace's
aggregates and returns the index updates to make after the commit (``None``: none)."""

HANDLERS: dict[type, Handler] = {
    RunAdmitted: JournalHandling.admit,
    RunQueued: JournalHandling.transition,
    RunStarted: JournalHandling.transition,
    RunStopped: JournalHandling.transition,
    RunFailed: JournalHandling.transition,
    RunThrottled: JournalHandling.transition,
    RunRejected: JournalHandling.transition,
    RunCompleted: JournalHandling.complete,
    RunStage: JournalHandling.stage,
    EvidenceGranted: JournalHandling.grant,
    ToolReceipt: JournalHandling.receipt,
    AnswerPublished: JournalHandling.published,
    AnswerUnchanged: JournalHandling.unchanged,
    SourceTombstoned: JournalHandling.tombstone,
    ConversationDeleteRequested: JournalHandling.delete_requested,
    RunHeartbeat: JournalHandling.heartbeat,
    RunCancelRequested: JournalHandling.cancel_requested,
}
"""One table: a reader finds what happens to a message by its type here."""

APPLIED_TYPES: frozenset[str] = frozenset(message_class.model_fields["type"].default for message_class in HANDLERS)
"""Every message type :meth:`JournalHandling.apply` acts on. Any other message of the journal's
topics (a proposal, a preview, a refusal…) changes nothing here, so its consumer may
acknowledge it without decoding it (the Publication and Delivery consumers, which apply
them, refuse what is malformed)."""


def retention_event_id(conversation_id: str, last_activity_iso: str) -> str:
    """Deterministic id of a retention deletion, so a repeated sweep is a no-op."""
    return str(uuid5(ids.conversation_id(conversation_id), f"retention:{last_activity_iso}"))


__all__ = ["IndexIntent", "JournalHandling", "MemoryWorkspace", "Workspace", "retention_event_id", "State"]

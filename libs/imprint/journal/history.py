"""X4/X5/X6/D5 — projecting an execution for reads and history, without recomputing anything.

* **No recomputation (X5).** A projection reads the frozen completion record and
  the appended facts of one execution. It never retrieves, never calls a
  provider, never re-selects citations, never infers an outcome from flags or
  source counts.
* **Public message check (X5).** :func:`check_public_message` compares a public
  message (body hash, outcome, evidence summary) with the frozen record and
  raises :class:`FrozenRecordMismatch` on any difference — it never repairs.
* **Lookup index (X4).** message → execution is a *mutable* :class:`MessageIndex`.
  :func:`resolve_execution` verifies every hit against the execution's immutable
  binding (conversation_id, message_id) and raises :class:`BindingMismatch` for a
  tampered entry; a missing/cleared entry raises :class:`ExecutionNotFound` —
  there is no fallback to "the latest execution of the conversation".
* **X6.** ``generation_unavailable`` projects no answer text, citations, sources,
  evidence items, snapshot or knowledge_version (they stay in the record).
* **D5.** Delivery state is an input. A completed execution whose delivery is
  ``pending``/``sent``/``interrupted`` is shown as ``delivery_unconfirmed``: content
  withheld, ``complete=False``, ``outcome`` still the frozen outcome (never
  rewritten as ``insufficient_evidence``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from imprint.journal.conditions import parse_conditions
from imprint.journal.execution import (
    F_ANSWER,
    F_CONDITIONS,
    F_QUESTION,
    AnswerExecution,
    CompletionRecord,
    excerpt_field,
    title_field,
)
from imprint.journal.lifecycle import LIVE, State
from imprint.journal.records import EvidenceItem
from imprint.journal.redaction import redact_items
from imprint.shredding import FieldSealer, Revealed, Shredded, Withheld
from imprint.journal.views import (
    DeliveryState,
    Display,
    EffectView,
    EvidenceItemView,
    ExecutionView,
    ReceiptView,
    RefusalView,
    TransitionView,
)

DELIVERED: Final = frozenset({"completed", "received", "rendered"})


# -- errors --------------------------------------------------------------------------------------


class HistoryError(Exception):
    code = "history_error"


class ExecutionNotFound(HistoryError):
    """The index has no entry for the message (or names no admitted execution)."""

    code = "execution_not_found"


class BindingMismatch(HistoryError):
    """The index names an execution whose immutable binding is another message or conversation."""

    code = "binding_mismatch"


class FrozenRecordMismatch(HistoryError):
    """A public message disagrees with the frozen completion record (X5)."""

    code = "frozen_record_mismatch"

    def __init__(self, field: str) -> None:
        super().__init__(f"public message differs from the frozen record in {field}")
        self.field = field


# -- the mutable lookup index -------------------------------------------------------------------


class MessageIndex(Protocol):
    """message → execution: a convenience pointer, never the source of truth."""

    def lookup(self, conversation_id: str, message_id: str) -> str | None: ...

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None: ...

    def point_many(self, pointers: Sequence[tuple[str, str, str]]) -> None:
        """Many (conversation, message, run) pointers at once."""
        ...

    def clear(self, conversation_id: str, message_id: str) -> None: ...

    def drop_conversation(self, conversation_id: str) -> None: ...


class InMemoryMessageIndex:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def lookup(self, conversation_id: str, message_id: str) -> str | None:
        with self._lock:
            return self._rows.get((conversation_id, message_id))

    def point(self, conversation_id: str, message_id: str, run_id: str) -> None:
        with self._lock:
            self._rows[(conversation_id, message_id)] = run_id

    def point_many(self, pointers: Sequence[tuple[str, str, str]]) -> None:
        with self._lock:
            for conversation_id, message_id, run_id in pointers:
                self._rows[(conversation_id, message_id)] = run_id

    def clear(self, conversation_id: str, message_id: str) -> None:
        with self._lock:
            self._rows.pop((conversation_id, message_id), None)

    def drop_conversation(self, conversation_id: str) -> None:
        with self._lock:
            for key in [k for k in self._rows if k[0] == conversation_id]:
                del self._rows[key]


def resolve_execution(
    index: MessageIndex,
    conversation_id: str,
    message_id: str,
    load: Callable[[str], AnswerExecution | None],
) -> AnswerExecution:
    """Follow the index and verify the immutable binding. Never falls back."""
    run_id = index.lookup(conversation_id, message_id)
    if run_id is None:
        raise ExecutionNotFound(f"no execution indexed for message {message_id}")
    execution = load(run_id)
    if execution is None or execution.request is None:
        raise ExecutionNotFound(f"indexed run {run_id} has no admitted execution")
    if execution.request.conversation_id != conversation_id or execution.request.message_id != message_id:
        raise BindingMismatch(f"index points message {message_id} at run {run_id}, which is bound to another message")
    return execution


# -- the frozen record, revealed ----------------------------------------------------------------


RevealedItem = EvidenceItem[Revealed]
"""An evidence item of the frozen record with its title and excerpt opened (or withheld)."""


@dataclass(frozen=True)
class RevealedRecord:
    outcome: str
    answer_text: Revealed | None
    items: tuple[RevealedItem, ...]
    snapshot_id: str | None
    knowledge_version: str | None

    @property
    def shredded(self) -> bool:
        return isinstance(self.answer_text, Withheld) or any(isinstance(i.excerpt, Withheld) or isinstance(i.title, Withheld) for i in self.items)


def reveal_record(execution: AnswerExecution, sealer: FieldSealer) -> RevealedRecord | None:
    record: CompletionRecord | None = execution.record
    if record is None or execution.request is None:
        return None
    cid, rid = execution.request.conversation_id, execution.run_id
    return RevealedRecord(
        outcome=record.outcome,
        answer_text=sealer.open(cid, rid, F_ANSWER, record.answer_text),
        items=tuple(
            RevealedItem(i.source_id, sealer.open(cid, rid, title_field(n), i.title), sealer.open(cid, rid, excerpt_field(n), i.excerpt))
            for n, i in enumerate(record.items)
        ),
        snapshot_id=record.snapshot_id,
        knowledge_version=record.knowledge_version,
    )


def body_sha256(text: str | None) -> str | None:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if isinstance(text, str) else None


@dataclass(frozen=True)
class PublicMessage:
    """What a client was (or is about to be) shown for an execution."""

    body_sha256: str | None
    outcome: str | None
    evidence_source_ids: tuple[str, ...]


def public_message_of(record: RevealedRecord) -> PublicMessage:
    """The public message a frozen record allows (X6 included)."""
    if record.outcome == "generation_unavailable":
        return PublicMessage(None, record.outcome, ())
    text = record.answer_text if isinstance(record.answer_text, str) else None
    return PublicMessage(body_sha256(text), record.outcome, tuple(i.source_id for i in record.items))


def check_public_message(public: PublicMessage, record: RevealedRecord) -> None:
    """X5: raise :class:`FrozenRecordMismatch` unless ``public`` agrees with the frozen record."""
    if public.outcome != record.outcome:
        raise FrozenRecordMismatch("outcome")
    if isinstance(record.answer_text, Withheld):
        return  # shredded: nothing left to compare the body against (and nothing will be shown)
    expected = public_message_of(record)
    if public.body_sha256 != expected.body_sha256:
        raise FrozenRecordMismatch("body")
    if tuple(public.evidence_source_ids) != expected.evidence_source_ids:
        raise FrozenRecordMismatch("evidence_summary")


# -- projection ---------------------------------------------------------------------------------


def _text(value: Revealed | None) -> tuple[str | None, bool]:
    """(shown text, was it shredded)."""
    if isinstance(value, Withheld):
        return None, isinstance(value, Shredded)
    return value, False


def project_execution(
    execution: AnswerExecution,
    sealer: FieldSealer,
    delivery_state: DeliveryState = "pending",
    public_message: PublicMessage | None = None,
) -> ExecutionView:
    """Project one admitted execution. Raises :class:`FrozenRecordMismatch` if ``public_message`` disagrees."""
    request = execution.request
    if request is None or execution.state is None:
        raise ExecutionNotFound(f"run {execution.run_id} was never admitted")
    base = dict(
        run_id=execution.run_id,
        account_id=request.account_id,
        conversation_id=request.conversation_id,
        message_id=request.message_id,
        state=execution.state.value,
        delivery_state=delivery_state,
        qcs_id=request.qcs_id,
        inherits_from=request.inherits_from,
        transitions=[TransitionView(state=t.state.value, previous=t.previous.value if t.previous else None, sequence=t.sequence, at=t.at) for t in execution.transitions],
        receipts=[ReceiptView(tool_call_id=r.tool_call_id, status=r.status, at=r.at) for r in execution.receipts],
        effects=[
            EffectView(kind=e.kind, candidate_id=e.candidate_id, block_id=e.block_id, revision=e.revision, receipt_id=e.receipt_id, log_position=e.log_position, body_sha256=e.body_sha256)
            for e in execution.effects
        ],
        refusals=[RefusalView(message_type=r.message_type, code=r.code, detail=r.detail, at=r.at) for r in execution.refusals],
        diagnostics=execution.trace.render(),
        redacted_sources=sorted(execution.redacted_sources),
    )
    if execution.erased:
        # X8: identities and lifecycle facts stay; no private field is opened.
        return ExecutionView(**base, outcome=execution.outcome if execution.state is State.COMPLETED else None, display="deleted", deleted=True, shredded=True)

    cid, rid = request.conversation_id, execution.run_id
    question, q_shredded = _text(sealer.open(cid, rid, F_QUESTION, request.question))
    conditions_raw, c_shredded = _text(sealer.open(cid, rid, F_CONDITIONS, request.conditions))
    conditions = parse_conditions(conditions_raw) if conditions_raw is not None else None
    shredded = q_shredded or c_shredded
    base.update(question=question, conditions=conditions)

    state = execution.state
    if state in LIVE:
        return ExecutionView(**base, display="in_progress", shredded=shredded)
    if state is not State.COMPLETED:
        # stopped / failed / throttled / rejected: no answer is invented (effects stay listed, P20).
        return ExecutionView(**base, display=state.value, shredded=shredded)  # type: ignore[arg-type]

    record = reveal_record(execution, sealer)
    assert record is not None, "a completed execution always has a frozen record"
    if public_message is not None:
        check_public_message(public_message, record)
    shredded = shredded or record.shredded
    answer, _ = _text(record.answer_text)
    delivered = delivery_state in DELIVERED
    outcome = record.outcome

    if not delivered:
        # D5: conservative — not a complete answer, not rewritten as insufficient evidence.
        return ExecutionView(**base, outcome=outcome, display="delivery_unconfirmed", complete=False, shredded=shredded)  # type: ignore[arg-type]

    if outcome == "generation_unavailable":
        # X6: no claims, citations, sources or evidence preview.
        return ExecutionView(**base, outcome=outcome, display="generation_unavailable", complete=True, shredded=shredded)

    evidence = [
        EvidenceItemView(source_id=v.source_id, title=v.title, excerpt=v.excerpt, redacted=v.redacted)
        for v in redact_items(
            ((i.source_id, i.title if isinstance(i.title, str) else "", i.excerpt if isinstance(i.excerpt, str) else None) for i in record.items),
            set(execution.redacted_sources),
        )
    ]
    display: Display = "answer" if outcome == "answered" else outcome  # type: ignore[assignment]
    return ExecutionView(
        **base,
        outcome=outcome,  # type: ignore[arg-type]
        display=display,
        complete=True,
        answer_text=answer,
        body_sha256=body_sha256(answer),
        evidence=evidence,
        snapshot_id=record.snapshot_id,
        knowledge_version=record.knowledge_version,
        shredded=shredded,
    )

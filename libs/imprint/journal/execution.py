"""The ``AnswerExecution`` aggregate: one run, from its private request to its frozen record.

Id: ``uuid5(JOURNAL_NAMESPACE, "run:" + run_id)`` (:func:`imprint.journal.ids.execution_id`).

* **X1** ``Admitted`` carries the private ``answer_execution_request/v1`` record —
  account, exact message binding (conversation_id, message_id), question and QCS
  — and nothing else may happen before it (see :mod:`imprint.journal.lifecycle`).
* **X2** lifecycle transitions through the one table in ``lifecycle``; a refused
  message is recorded as ``Refused`` (typed code) and changes nothing. An exact
  redelivery (same ``event_id``) is a no-op.
* **P19** tool receipts (``ToolReceiptRecorded``) and publication effects seen on
  ``imprint.publication.v1`` (``EffectObserved``) are separate facts; neither is
  ever inferred from the other.
* **P20** effects observed before a failure stay; a failed run keeps them and
  never becomes "answered" because of them.
* **X4** ``Closed`` freezes the completion record once; a second, different
  completion is refused (``contradictory_completion``).
* **X7** ``EvidenceRedacted`` marks a tombstoned source; the record is untouched.
* **X8** ``Erased`` marks the execution of a deleted conversation; its private
  fields were sealed under the conversation key, which is destroyed.
* **X10** ``LeaseLapsed`` records that the run's runtime fell silent for longer than its
  lease; the run is closed ``failed`` (``runtime_lost``) in the same transaction
  (:mod:`imprint.journal.leases` decides when).
* **X11** ``StopRequested`` records that the run's user asked it to stop while it was open
  (:mod:`imprint.journal.stopping`); the runtime ends it, and the ``stopped`` transition that
  follows carries the reason ``stop_requested``.

Private fields are stored only as sealed strings (:mod:`imprint.shredding`);
this module never sees plaintext.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from eventsourcing.domain import Aggregate

from imprint.journal import ids
from imprint.journal.diagnostics import DiagnosticRefused, DiagnosticTrace
from imprint.journal.events import MessageEvent
from imprint.journal.lifecycle import LIVE, STOP_REQUESTED, State, check_live_fact, check_transition
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.journal.stopping import check_stop_request

REQUEST_SCHEMA = "answer_execution_request/v1"
COMPLETION_SCHEMA = "answer_execution_completion/v1"

# Field names used as associated data when sealing (see shredding.associated_data).
F_QUESTION = "request.question"
F_NORMALIZED = "request.normalized_question"
F_CONDITIONS = "request.qcs.conditions"
F_ANSWER = "completion.answer_text"
F_REASON = "transition.reason"
F_STAGE_DETAIL = "stage.detail"


def excerpt_field(index: int) -> str:
    return f"completion.evidence.{index}.excerpt"


def title_field(index: int) -> str:
    return f"completion.evidence.{index}.title"


def grant_title_field(event_id: str) -> str:
    return f"grant.{event_id}.title"


@dataclass(frozen=True)
class AnswerExecutionRequest:
    """X1: the private ``answer_execution_request/v1`` record. Sealed fields are ``esv1.`` strings."""

    run_id: str
    account_id: str
    conversation_id: str
    message_id: str
    question: str
    normalized_question: str
    qcs_id: str
    inherits_from: str | None
    conditions: str
    condition_count: int
    condition_sources: dict[str, int]
    admission_event_id: str
    requested_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": REQUEST_SCHEMA,
            "run_id": self.run_id,
            "account_id": self.account_id,
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "question": self.question,
            "normalized_question": self.normalized_question,
            "qcs": {
                "qcs_id": self.qcs_id,
                "inherits_from": self.inherits_from,
                "conditions": self.conditions,
                "condition_count": self.condition_count,
                "condition_sources": dict(self.condition_sources),
            },
            "admission_event_id": self.admission_event_id,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnswerExecutionRequest:
        q = d["qcs"]
        return cls(
            run_id=d["run_id"],
            account_id=d["account_id"],
            conversation_id=d["conversation_id"],
            message_id=d["message_id"],
            question=d["question"],
            normalized_question=d["normalized_question"],
            qcs_id=q["qcs_id"],
            inherits_from=q["inherits_from"],
            conditions=q["conditions"],
            condition_count=q["condition_count"],
            condition_sources=dict(q["condition_sources"]),
            admission_event_id=d["admission_event_id"],
            requested_at=d["requested_at"],
        )


@dataclass(frozen=True)
class FrozenItem:
    source_id: str
    title: str | None
    """Sealed title (a private source's title can be as telling as its excerpt), or ``None``."""
    excerpt: str | None
    """Sealed excerpt, or ``None`` when the runtime gave none."""


@dataclass(frozen=True)
class CompletionRecord:
    """X4: the frozen completion. ``answer_text`` and excerpts are sealed;
    ``fingerprint`` is a keyed MAC of the plaintext record (equal records ⇔ equal fingerprints)."""

    outcome: str
    answer_text: str | None
    items: tuple[FrozenItem, ...]
    snapshot_id: str | None
    knowledge_version: str | None
    fingerprint: str
    event_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": COMPLETION_SCHEMA,
            "outcome": self.outcome,
            "answer_text": self.answer_text,
            "items": [{"source_id": i.source_id, "title": i.title, "excerpt": i.excerpt} for i in self.items],
            "snapshot_id": self.snapshot_id,
            "knowledge_version": self.knowledge_version,
            "fingerprint": self.fingerprint,
            "event_id": self.event_id,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompletionRecord:
        return cls(
            outcome=d["outcome"],
            answer_text=d["answer_text"],
            items=tuple(FrozenItem(i["source_id"], i["title"], i["excerpt"]) for i in d["items"]),
            snapshot_id=d["snapshot_id"],
            knowledge_version=d["knowledge_version"],
            fingerprint=d["fingerprint"],
            event_id=d["event_id"],
        )

    @property
    def source_ids(self) -> list[str]:
        return [i.source_id for i in self.items]


@dataclass(frozen=True)
class RefusalRecord:
    event_id: str
    message_type: str
    code: str
    detail: str
    at: datetime


@dataclass(frozen=True)
class TransitionRecord:
    state: State
    previous: State | None
    sequence: int
    event_id: str
    reason: str | None
    at: datetime


@dataclass(frozen=True)
class ReceiptRecord:
    """P19: the runtime's tool receipt — its own fact, settled apart from the publication effect."""

    tool_call_id: str
    status: str
    event_id: str
    at: datetime


EffectKind = Literal["published", "unchanged"]


@dataclass(frozen=True)
class EffectRecord:
    """P19/P20: a publication effect observed on ``imprint.publication.v1`` — not a receipt."""

    kind: EffectKind
    candidate_id: str
    block_id: str
    revision: int
    body_sha256: str | None
    receipt_id: str
    log_position: int
    event_id: str
    at: datetime


@dataclass(frozen=True)
class GrantRecord:
    source_id: str
    scope: str
    owner_account_id: str
    title: str | None
    """Sealed."""


@dataclass
class _Stage:
    stage: str
    detail: str | None
    at: datetime
    event_id: str


class AnswerExecution(Aggregate):
    class_version = 1

    id_for = create_id = staticmethod(ids.execution_id)
    """The aggregate's id, derived from its natural key (:mod:`imprint.journal.ids`); as
    ``create_id``, the library's id of ``AnswerExecution(run_id)``."""

    class Opened(Aggregate.Created):
        class_version = 1
        run_id: str

    class Admitted(MessageEvent):
        class_version = 1
        request: dict[str, Any]

        def change(self, x: AnswerExecution) -> None:
            x.request = AnswerExecutionRequest.from_dict(self.request)
            x._enter(State.ADMITTED, self.event_id, None, self.timestamp)

    class Transitioned(MessageEvent):
        class_version = 1
        run_id: str
        state: str
        previous: str
        sequence: int
        account_id: str
        conversation_id: str
        outcome: str | None
        reason: str | None

        def change(self, x: AnswerExecution) -> None:
            x._enter(State(self.state), self.event_id, self.reason, self.timestamp)
            if self.outcome is not None:
                x.outcome = self.outcome

    class Closed(Aggregate.Event):
        """The closed execution record is persisted (announced as ``run.closed``)."""

        class_version = 1
        run_id: str
        event_id: str
        state: str
        account_id: str
        conversation_id: str
        message_id: str
        record: dict[str, Any] | None
        redacted: list[str]
        """Sources of the record already redacted when it closed (tombstoned during generation)."""

        def apply(self, x: AnswerExecution) -> None:
            x.closed_at = self.timestamp
            if self.record is not None:
                x.record = CompletionRecord.from_dict(self.record)
            x._trace("closed", self.state)

    class StageReported(MessageEvent):
        class_version = 1
        run_id: str
        account_id: str
        conversation_id: str
        stage: str
        detail: str | None

        def change(self, x: AnswerExecution) -> None:
            x.stages.append(_Stage(self.stage, self.detail, self.timestamp, self.event_id))
            x._trace("stage", self.stage)

    class EvidenceGranted(MessageEvent):
        """The runtime's ``evidence.granted`` (:class:`imprint.contracts.runtime.EvidenceGranted`),
        the same fact, as the execution's Journal log keeps it (its title sealed, X8)."""

        class_version = 1
        source_id: str
        scope: str
        owner_account_id: str
        title: str | None

        def change(self, x: AnswerExecution) -> None:
            x.grants.append(GrantRecord(self.source_id, self.scope, self.owner_account_id, self.title))
            x._trace("evidence.granted", self.source_id)

    class ToolReceiptRecorded(MessageEvent):
        class_version = 1
        tool_call_id: str
        status: str

        def change(self, x: AnswerExecution) -> None:
            x.receipts.append(ReceiptRecord(self.tool_call_id, self.status, self.event_id, self.timestamp))
            x._trace(f"receipt.{self.status}", self.tool_call_id)

    class EffectObserved(MessageEvent):
        class_version = 1
        kind: str
        candidate_id: str
        block_id: str
        revision: int
        body_sha256: str | None
        receipt_id: str
        log_position: int

        def change(self, x: AnswerExecution) -> None:
            x.effects.append(
                EffectRecord(
                    self.kind,  # type: ignore[arg-type]
                    self.candidate_id,
                    self.block_id,
                    self.revision,
                    self.body_sha256,
                    self.receipt_id,
                    self.log_position,
                    self.event_id,
                    self.timestamp,
                )
            )
            x._trace(f"effect.{self.kind}", self.block_id)

    class Refused(MessageEvent):
        class_version = 1
        message_type: str
        code: str
        detail: str

        def change(self, x: AnswerExecution) -> None:
            x.refusals.append(RefusalRecord(self.event_id, self.message_type, self.code, self.detail, self.timestamp))
            x._trace(f"refused.{self.code}", self.message_type)

    class EvidenceRedacted(Aggregate.Event):
        class_version = 1
        source_id: str
        cause: str

        def apply(self, x: AnswerExecution) -> None:
            x.redacted_sources[self.source_id] = self.timestamp
            x._trace("evidence.redacted", self.source_id)

    class Erased(MessageEvent):
        class_version = 1
        run_id: str
        reason: str
        account_id: str
        conversation_id: str

        def change(self, x: AnswerExecution) -> None:
            x.erased_at = self.timestamp
            x.erasure_reason = self.reason
            x._trace("erased", self.reason)

    class LeaseLapsed(MessageEvent):
        """X10: no runtime message of the open run reached the Journal for ``lease_seconds``;
        the closing (``failed``, ``reason``) follows in the same transaction."""
        class_version = 1

        run_id: str
        account_id: str
        conversation_id: str
        reason: str
        lease_seconds: float

        def change(self, x: AnswerExecution) -> None:
            x.lapsed = self.reason
            x._trace("lease.lapsed", None)

    class StopRequested(MessageEvent):
        """X11: the run's user asked it to stop (``run.cancel_requested``) while it was open.
        A request, not a transition: the run stays as it is until its runtime ends it."""
        class_version = 1

        run_id: str
        account_id: str
        conversation_id: str

        def change(self, x: AnswerExecution) -> None:
            x.stop_requested_at = self.timestamp
            x._trace("stop.requested", None)

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.stop_requested_at: datetime | None = None
        """X11: when the run's user first asked it to stop, while it was open."""
        self.lapsed: str | None = None
        """X10: why the Journal closed the run when its lease lapsed (``runtime_lost``)."""
        self.request: AnswerExecutionRequest | None = None
        self.state: State | None = None
        self.outcome: str | None = None
        self.sequence = 0
        self.transitions: list[TransitionRecord] = []
        self.processed: set[str] = set()
        self.refusals: list[RefusalRecord] = []
        self.stages: list[_Stage] = []
        self.grants: list[GrantRecord] = []
        self.receipts: list[ReceiptRecord] = []
        self.effects: list[EffectRecord] = []
        self.record: CompletionRecord | None = None
        self.closed_at: datetime | None = None
        self.redacted_sources: dict[str, datetime] = {}
        self.erased_at: datetime | None = None
        self.erasure_reason: str | None = None
        self.trace = DiagnosticTrace()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def open(cls, run_id: str) -> AnswerExecution:
        """A fresh, not yet admitted execution (admission, a refusal or an early effect follows)."""
        return cls(run_id)

    # -- queries --------------------------------------------------------------------------------

    @property
    def admitted(self) -> bool:
        return self.request is not None

    @property
    def erased(self) -> bool:
        return self.erased_at is not None

    @property
    def account_id(self) -> str | None:
        return self.request.account_id if self.request else None

    @property
    def conversation_id(self) -> str | None:
        return self.request.conversation_id if self.request else None

    @property
    def message_id(self) -> str | None:
        return self.request.message_id if self.request else None

    def has_seen(self, event_id: str) -> bool:
        return event_id in self.processed

    def effects_for(self, candidate_id: str) -> list[EffectRecord]:
        return [e for e in self.effects if e.candidate_id == candidate_id]

    def receipts_for(self, tool_call_id: str) -> list[ReceiptRecord]:
        return [r for r in self.receipts if r.tool_call_id == tool_call_id]

    # -- commands: each returns True when it appended a fact that changes state -----------------

    def refuse(self, event_id: str, message_type: str, refusal: Refusal) -> None:
        if event_id in self.processed:
            return
        self.trigger_event(self.Refused, event_id=event_id, message_type=message_type, code=refusal.code.value, detail=refusal.detail)

    def admit(self, event_id: str, request: AnswerExecutionRequest) -> bool:
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            check_transition(self.state, State.ADMITTED)
            if request.run_id != self.run_id:
                raise Refusal(RefusalCode.ILLEGAL_TRANSITION, "request bound to another run")
        except Refusal as r:
            self.refuse(event_id, "run.admitted", r)
            return False
        self.trigger_event(self.Admitted, event_id=event_id, request=request.to_dict())
        return True

    def transition(self, event_id: str, message_type: str, target: State, reason: str | None = None) -> bool:
        """A non-completing transition (queued, running, stopped, failed, throttled, rejected)."""
        if event_id in self.processed:
            return False
        if target is State.COMPLETED:
            raise ValueError("use complete() for completions")
        try:
            self._check_not_erased()
            check_transition(self.state, target)
        except Refusal as r:
            self.refuse(event_id, message_type, r)
            return False
        if target is State.STOPPED and reason is None and self.stop_requested_at is not None:
            reason = STOP_REQUESTED  # X11: the runtime stopped the run its user asked to stop
        self._trigger_transition(event_id, target, None, reason)
        if target in (State.STOPPED, State.FAILED, State.THROTTLED, State.REJECTED):
            self._trigger_closed(event_id, target, None)
        return True

    def complete(self, event_id: str, record: CompletionRecord, tombstoned: frozenset[str] = frozenset()) -> bool:
        """Freeze the completion record (X4). ``tombstoned``: sources of the record already tombstoned —
        they are redacted *before* the record closes, so even the closing announcement knows (X7)."""
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            if self.state is State.COMPLETED and self.record is not None:
                if self.record.fingerprint == record.fingerprint:
                    raise Refusal(RefusalCode.DUPLICATE_COMPLETION, f"already completed by {self.record.event_id}")
                raise Refusal(RefusalCode.CONTRADICTORY_COMPLETION, f"frozen by {self.record.event_id}; outcome {self.record.outcome} vs {record.outcome}")
            check_transition(self.state, State.COMPLETED, record.outcome)
        except Refusal as r:
            self.refuse(event_id, "run.completed", r)
            return False
        self._trigger_transition(event_id, State.COMPLETED, record.outcome, None)
        for source_id in dict.fromkeys(record.source_ids):
            if source_id in tombstoned:
                self.redact(source_id)
        self._trigger_closed(event_id, State.COMPLETED, record)
        return True

    def lapse(self, event_id: str, reason: str, lease_seconds: float) -> bool:
        """X10: the lease lapsed — record it and close the run ``failed`` with ``reason`` (a
        Journal code, unsealed). Only an open run lapses; anything else changes nothing."""
        if event_id in self.processed or self.erased or self.state not in LIVE:
            return False
        assert self.request is not None
        self.trigger_event(self.LeaseLapsed, run_id=self.run_id, event_id=event_id,
                           account_id=self.request.account_id, conversation_id=self.request.conversation_id,
                           reason=reason, lease_seconds=lease_seconds)
        self._trigger_transition(event_id, State.FAILED, None, reason)
        self._trigger_closed(event_id, State.FAILED, None)
        return True

    def request_stop(self, event_id: str, account_id: str) -> bool:
        """X11: the user asked the run to stop. Recorded once, while the run is open; a request
        for a run that already ended (or was asked already) changes nothing; one naming another
        account, or a run never admitted, is refused and recorded."""
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            if not check_stop_request(self.state, self.account_id, account_id, self.stop_requested_at is not None):
                return False
        except Refusal as r:
            self.refuse(event_id, "run.cancel_requested", r)
            return False
        assert self.request is not None
        self.trigger_event(self.StopRequested, run_id=self.run_id, event_id=event_id,
                           account_id=self.request.account_id, conversation_id=self.request.conversation_id)
        return True

    def beat(self, event_id: str) -> bool:
        """X10: a heartbeat renews the lease outside the log, so an open run records nothing;
        one for a run that is not open (never admitted, closed, erased) is refused and recorded."""
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            check_live_fact(self.state, "run.heartbeat")
        except Refusal as r:
            self.refuse(event_id, "run.heartbeat", r)
        return False  # a heartbeat never changes the run

    def report_stage(self, event_id: str, stage: str, detail: str | None) -> bool:
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            check_live_fact(self.state, "run.stage")
        except Refusal as r:
            self.refuse(event_id, "run.stage", r)
            return False
        assert self.request is not None
        self.trigger_event(
            self.StageReported,
            run_id=self.run_id,
            event_id=event_id,
            account_id=self.request.account_id,
            conversation_id=self.request.conversation_id,
            stage=stage,
            detail=detail,
        )
        return True

    def grant(self, event_id: str, source_id: str, scope: str, owner_account_id: str, title: str | None) -> bool:
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            check_live_fact(self.state, "evidence.granted")
        except Refusal as r:
            self.refuse(event_id, "evidence.granted", r)
            return False
        self.trigger_event(self.EvidenceGranted, event_id=event_id, source_id=source_id, scope=scope, owner_account_id=owner_account_id, title=title)
        return True

    def record_receipt(self, event_id: str, tool_call_id: str, status: str) -> bool:
        """P19: a receipt may settle after the run ended, but not before admission."""
        if event_id in self.processed:
            return False
        try:
            self._check_not_erased()
            if self.state is None:
                raise Refusal(RefusalCode.NOT_ADMITTED, "tool.receipt before admission")
        except Refusal as r:
            self.refuse(event_id, "tool.receipt", r)
            return False
        self.trigger_event(self.ToolReceiptRecorded, event_id=event_id, tool_call_id=tool_call_id, status=status)
        return True

    def observe_effect(
        self,
        event_id: str,
        kind: EffectKind,
        candidate_id: str,
        block_id: str,
        revision: int,
        body_sha256: str | None,
        receipt_id: str,
        log_position: int,
    ) -> bool:
        """P19/P20: a committed publication effect. Recorded in any state — Publication's log is
        ordered apart from the runtime topic, so an effect may be seen before the admission or after
        a failure; either way it is a fact about Publication, not about the run's success."""
        if event_id in self.processed:
            return False
        self.trigger_event(
            self.EffectObserved,
            event_id=event_id,
            kind=kind,
            candidate_id=candidate_id,
            block_id=block_id,
            revision=revision,
            body_sha256=body_sha256,
            receipt_id=receipt_id,
            log_position=log_position,
        )
        return True

    def redact(self, source_id: str, cause: str = "source_tombstoned") -> bool:
        """X7: hide this source's excerpts from now on. Idempotent per source."""
        if source_id in self.redacted_sources:
            return False
        self.trigger_event(self.EvidenceRedacted, source_id=source_id, cause=cause)
        return True

    def erase(self, event_id: str, reason: str) -> bool:
        """X8: the conversation was deleted; the sealed fields are now unreadable (key destroyed)."""
        if self.erased or event_id in self.processed or self.request is None:
            return False
        self.trigger_event(
            self.Erased,
            run_id=self.run_id,
            event_id=event_id,
            reason=reason,
            account_id=self.request.account_id,
            conversation_id=self.request.conversation_id,
        )
        return True

    # -- internals ------------------------------------------------------------------------------

    def _check_not_erased(self) -> None:
        if self.erased:
            raise Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted")

    def _trigger_transition(self, event_id: str, target: State, outcome: str | None, reason: str | None) -> None:
        assert self.request is not None and self.state is not None
        self.trigger_event(
            self.Transitioned,
            run_id=self.run_id,
            event_id=event_id,
            state=target.value,
            previous=self.state.value,
            sequence=self.sequence + 1,
            account_id=self.request.account_id,
            conversation_id=self.request.conversation_id,
            outcome=outcome,
            reason=reason,
        )

    def _trigger_closed(self, event_id: str, state: State, record: CompletionRecord | None) -> None:
        assert self.request is not None
        self.trigger_event(
            self.Closed,
            run_id=self.run_id,
            event_id=event_id,
            state=state.value,
            account_id=self.request.account_id,
            conversation_id=self.request.conversation_id,
            message_id=self.request.message_id,
            record=record.to_dict() if record else None,
            redacted=sorted(s for s in self.redacted_sources if record and s in record.source_ids),
        )

    def _enter(self, state: State, event_id: str, reason: str | None, at: datetime) -> None:
        previous = self.state
        self.sequence += 1
        self.state = state
        self.transitions.append(TransitionRecord(state, previous, self.sequence, event_id, reason, at))
        self._trace(f"state.{state.value}", None)

    def _trace(self, code: str, ref: str | None) -> None:
        try:
            self.trace.add(code, ref)
        except DiagnosticRefused:
            self.trace.add(code)

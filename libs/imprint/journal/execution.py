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
* **X12** ``Interrupted`` records that a newer question of the conversation stops the run
  (``interrupt`` or a send-now): a stop request like X11's, announced as ``run.cancel_requested``
  naming that question, after which the ``stopped`` transition carries the reason
  ``interrupted``; ``Steered`` records a newer question handed to the running run (announced as
  ``run.steered``); :meth:`AnswerExecution.close` is the Journal ending a run its conversation's
  policy ended (refused, cancelled, merged, steered), as a lease lapse does.
* **X11** ``StopRequested`` records that the run's user asked it to stop while it was open
  (:mod:`imprint.journal.stopping`); the runtime ends it, and the ``stopped`` transition that
  follows carries the reason ``stop_requested``.

Private fields are stored only as sealed strings (:mod:`imprint.shredding`);
this module never sees plaintext. Its records (request, completion, one value per fact) are
:mod:`imprint.journal.records`.

One file, though long: the aggregate, its nested events and the commands that trigger them
are one consistency boundary — eventsourcing stores each event under its aggregate's qualified
name (``imprint.journal.execution:AnswerExecution.<Event>``, the topic in every stored log), so
the events cannot move, and each command is the one place its event is triggered from.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from eventsourcing.domain import Aggregate

from imprint.ids import FoundByKey
from imprint.journal import ids
from imprint.journal.diagnostics import DiagnosticRefused, DiagnosticTrace
from imprint.journal.events import MessageEvent
from imprint.journal.lifecycle import INTERRUPTED, LIVE, STOP_REQUESTED, State, check_live_fact, check_transition
from imprint.journal.records import (  # the records' names stay importable from here too
    COMPLETION_SCHEMA, F_ANSWER, F_CONDITIONS, F_NORMALIZED, F_QUESTION, F_REASON, F_STAGE_DETAIL, REQUEST_SCHEMA,
    AnswerExecutionRequest, CompletionRecord, EffectKind, EffectRecord, FrozenItem, GrantRecord, ReceiptRecord,
    RefusalRecord, StageRecord, TransitionRecord, excerpt_field, grant_title_field, title_field,
)
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.journal.stopping import check_stop_request

__all__ = [
    "COMPLETION_SCHEMA", "F_ANSWER", "F_CONDITIONS", "F_NORMALIZED", "F_QUESTION", "F_REASON",
    "F_STAGE_DETAIL", "REQUEST_SCHEMA", "AnswerExecution", "AnswerExecutionRequest", "CompletionRecord",
    "EffectKind", "EffectRecord", "FrozenItem", "GrantRecord", "ReceiptRecord", "RefusalRecord",
    "RunEvent", "StageRecord", "TransitionRecord", "excerpt_field", "grant_title_field", "title_field",
]


class RunEvent(MessageEvent):
    """A fact about an admitted run that names the run, its account and its conversation — what
    its announcement carries (:mod:`imprint.journal.announcements`). The aggregate fills the
    three in (:meth:`AnswerExecution._trigger_run_event`); a base, never stored itself."""

    run_id: str
    account_id: str
    conversation_id: str


class AnswerExecution(FoundByKey, Aggregate, key=ids.execution_id, by=("run_id",)):
    class_version = 1

    class Opened(Aggregate.Created):
        class_version = 1
        run_id: str

    class Admitted(MessageEvent):
        class_version = 1
        request: dict[str, Any]

        def change(self, x: AnswerExecution) -> None:
            x.request = AnswerExecutionRequest.from_dict(self.request)
            x._enter(State.ADMITTED, self.event_id, None, self.timestamp)

    class Transitioned(RunEvent):
        class_version = 1
        state: str
        previous: str
        sequence: int
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

    class StageReported(RunEvent):
        class_version = 1
        stage: str
        detail: str | None

        def change(self, x: AnswerExecution) -> None:
            x.stages.append(StageRecord(self.stage, self.detail, self.timestamp, self.event_id))
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
            x.effects.append(EffectRecord(self.kind, self.candidate_id, self.block_id, self.revision,  # type: ignore[arg-type]
                                          self.body_sha256, self.receipt_id, self.log_position, self.event_id,
                                          self.timestamp))
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

    class Erased(RunEvent):
        class_version = 1
        reason: str

        def change(self, x: AnswerExecution) -> None:
            x.erased_at = self.timestamp
            x.erasure_reason = self.reason
            x._trace("erased", self.reason)

    class LeaseLapsed(RunEvent):
        """X10: no runtime message of the open run reached the Journal for ``lease_seconds``;
        the closing (``failed``, ``reason``) follows in the same transaction."""
        class_version = 1
        reason: str
        lease_seconds: float

        def change(self, x: AnswerExecution) -> None:
            x.lapsed = self.reason
            x._trace("lease.lapsed", None)

    class StopRequested(RunEvent):
        """X11: the run's user asked it to stop (``run.cancel_requested``) while it was open.
        A request, not a transition: the run stays as it is until its runtime ends it."""
        class_version = 1

        def change(self, x: AnswerExecution) -> None:
            x.stop_requested_at = self.timestamp
            x._trace("stop.requested", None)

    class Interrupted(RunEvent):
        """X12: the newer question ``by_run_id`` stops this run (its ``event_id`` is the stop
        request the runtime hears, :func:`imprint.journal.ids.interruption_id`)."""
        class_version = 1
        by_run_id: str

        def change(self, x: AnswerExecution) -> None:
            x.stop_requested_at = x.stop_requested_at or self.timestamp
            x.interrupted_by = self.by_run_id
            x._trace("interrupted", None)

    class PolicyEnded(RunEvent):
        """X12: the Journal closes the run because its conversation's policy ended its question
        before it started (``end``: refused, cancelled, merged, steered); the transition and the
        closing follow in the same transaction. Announced to Publication as ``run.ended_by_policy``."""
        class_version = 1
        state: str
        end: str

        def change(self, x: AnswerExecution) -> None:
            x._trace("policy.ended", self.end)

    class Steered(RunEvent):
        """X12: the newer question ``steered_run_id`` was handed to this running run;
        ``question`` sealed under the conversation key for that run (X8)."""
        class_version = 1
        steered_run_id: str
        message_id: str
        question: str | None

        def change(self, x: AnswerExecution) -> None:
            x.steered.append(self.steered_run_id)
            x._trace("steered", None)

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.interrupted_by: str | None = None
        """X12: the newer question that stopped this run."""
        self.steered: list[str] = []
        """X12: the questions handed to this run while it ran."""
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
        self.stages: list[StageRecord] = []
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
        def check() -> None:
            check_transition(self.state, State.ADMITTED)
            if request.run_id != self.run_id:
                raise Refusal(RefusalCode.ILLEGAL_TRANSITION, "request bound to another run")

        if not self._accepts(event_id, "run.admitted", check):
            return False
        self.trigger_event(self.Admitted, event_id=event_id, request=request.to_dict())
        return True

    def transition(self, event_id: str, message_type: str, target: State, reason: str | None = None) -> bool:
        """A non-completing transition (queued, running, stopped, failed, throttled, rejected)."""
        if target is State.COMPLETED:
            raise ValueError("use complete() for completions")
        if not self._accepts(event_id, message_type, lambda: check_transition(self.state, target)):
            return False
        if target is State.STOPPED and reason is None and self.interrupted_by is not None:
            reason = INTERRUPTED  # X12: stopped because of a newer question
        elif target is State.STOPPED and reason is None and self.stop_requested_at is not None:
            reason = STOP_REQUESTED  # X11: the runtime stopped the run its user asked to stop
        self._trigger_transition(event_id, target, None, reason)
        if target in (State.STOPPED, State.FAILED, State.THROTTLED, State.REJECTED):
            self._trigger_closed(event_id, target, None)
        return True

    def complete(self, event_id: str, record: CompletionRecord, tombstoned: frozenset[str] = frozenset()) -> bool:
        """Freeze the completion record (X4). ``tombstoned``: sources of the record already tombstoned —
        they are redacted *before* the record closes, so even the closing announcement knows (X7)."""
        def check() -> None:
            if self.state is State.COMPLETED and self.record is not None:
                if self.record.fingerprint == record.fingerprint:
                    raise Refusal(RefusalCode.DUPLICATE_COMPLETION, f"already completed by {self.record.event_id}")
                raise Refusal(RefusalCode.CONTRADICTORY_COMPLETION, f"frozen by {self.record.event_id}; outcome {self.record.outcome} vs {record.outcome}")
            check_transition(self.state, State.COMPLETED, record.outcome)

        if not self._accepts(event_id, "run.completed", check):
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
        self._trigger_run_event(self.LeaseLapsed, event_id, reason=reason, lease_seconds=lease_seconds)
        self._trigger_transition(event_id, State.FAILED, None, reason)
        self._trigger_closed(event_id, State.FAILED, None)
        return True

    def close(self, event_id: str, target: State, reason: str, end: str) -> bool:
        """X12: the Journal ends the run because its conversation's policy did (``reason``, a
        Journal code; ``end``: how its question ended): refused (``rejected``), cancelled, merged or
        steered (``stopped``). Only a
        run that has not started is closed so; anything else changes nothing."""
        if self.erased or self.state not in (State.ADMITTED, State.QUEUED):
            return False  # (``event_id`` may be the admission's own, seen already: the caller guards)
        self._trigger_run_event(self.PolicyEnded, event_id, state=target.value, end=end)
        self._trigger_transition(event_id, target, None, reason)
        self._trigger_closed(event_id, target, None)
        return True

    def interrupt(self, event_id: str, by_run_id: str) -> bool:
        """X12: the newer question ``by_run_id`` stops this open run; once."""
        if event_id in self.processed or self.erased or self.state not in LIVE or self.interrupted_by:
            return False
        self._trigger_run_event(self.Interrupted, event_id, by_run_id=by_run_id)
        return True

    def steer(self, event_id: str, steered_run_id: str, message_id: str, question: str | None) -> bool:
        """X12: hand the newer question ``steered_run_id`` to this open run; once per question."""
        if event_id in self.processed or self.erased or self.state not in LIVE:
            return False
        self._trigger_run_event(self.Steered, event_id, steered_run_id=steered_run_id, message_id=message_id,
                                question=question)
        return True

    def request_stop(self, event_id: str, account_id: str) -> bool:
        """X11: the user asked the run to stop. Recorded once, while the run is open; a request
        for a run that already ended (or was asked already) changes nothing; one naming another
        account, or a run never admitted, is refused and recorded."""
        if not self._accepts(event_id, "run.cancel_requested", lambda: check_stop_request(
                self.state, self.account_id, account_id, self.stop_requested_at is not None)):
            return False
        self._trigger_run_event(self.StopRequested, event_id)
        return True

    def beat(self, event_id: str) -> bool:
        """X10: a heartbeat renews the lease outside the log, so an open run records nothing;
        one for a run that is not open (never admitted, closed, erased) is refused and recorded."""
        self._accepts(event_id, "run.heartbeat", lambda: check_live_fact(self.state, "run.heartbeat"))
        return False  # a heartbeat never changes the run

    def report_stage(self, event_id: str, stage: str, detail: str | None) -> bool:
        if not self._accepts(event_id, "run.stage", lambda: check_live_fact(self.state, "run.stage")):
            return False
        self._trigger_run_event(self.StageReported, event_id, stage=stage, detail=detail)
        return True

    def grant(self, event_id: str, source_id: str, scope: str, owner_account_id: str, title: str | None) -> bool:
        if not self._accepts(event_id, "evidence.granted", lambda: check_live_fact(self.state, "evidence.granted")):
            return False
        self.trigger_event(self.EvidenceGranted, event_id=event_id, source_id=source_id, scope=scope, owner_account_id=owner_account_id, title=title)
        return True

    def record_receipt(self, event_id: str, tool_call_id: str, status: str) -> bool:
        """P19: a receipt may settle after the run ended, but not before admission."""
        def check() -> None:
            if self.state is None:
                raise Refusal(RefusalCode.NOT_ADMITTED, "tool.receipt before admission")

        if not self._accepts(event_id, "tool.receipt", check):
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
        self.trigger_event(self.EffectObserved, event_id=event_id, kind=kind, candidate_id=candidate_id, block_id=block_id,
                           revision=revision, body_sha256=body_sha256, receipt_id=receipt_id, log_position=log_position)
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
        self._trigger_run_event(self.Erased, event_id, reason=reason)
        return True

    # -- internals ------------------------------------------------------------------------------

    def _accepts(self, event_id: str, message_type: str, check: Callable[[], bool | None]) -> bool:
        """Whether the message may change the run: not seen before (X2), the run not erased (X8),
        and ``check`` passing. A :class:`Refusal` either raises is recorded as ``Refused``; a
        ``check`` that returns ``False`` means the message changes nothing and is no refusal."""
        if event_id in self.processed:
            return False
        try:
            if self.erased:
                raise Refusal(RefusalCode.EXECUTION_ERASED, "conversation deleted")
            return check() is not False
        except Refusal as r:
            self.refuse(event_id, message_type, r)
            return False

    def _trigger_run_event(self, event: type[RunEvent], event_id: str, **fields: Any) -> None:
        """Append a :class:`RunEvent`, naming the run, its account and its conversation."""
        assert self.request is not None
        self.trigger_event(event, run_id=self.run_id, event_id=event_id, account_id=self.request.account_id,
                           conversation_id=self.request.conversation_id, **fields)

    def _trigger_transition(self, event_id: str, target: State, outcome: str | None, reason: str | None) -> None:
        assert self.state is not None
        self._trigger_run_event(self.Transitioned, event_id, state=target.value, previous=self.state.value,
                                sequence=self.sequence + 1, outcome=outcome, reason=reason)

    def _trigger_closed(self, event_id: str, state: State, record: CompletionRecord | None) -> None:
        assert self.request is not None
        self.trigger_event(self.Closed, run_id=self.run_id, event_id=event_id, state=state.value,
                           account_id=self.request.account_id, conversation_id=self.request.conversation_id,
                           message_id=self.request.message_id, record=record.to_dict() if record else None,
                           redacted=sorted(s for s in self.redacted_sources if record and s in record.source_ids))

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

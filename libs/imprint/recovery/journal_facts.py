"""What the runtime journal recorded about one run, as recovery compares it (R2, R5, R7, P19).

The journal is consulted read-only and only to *compare*: which committed block
revisions it observed (``answer.published``/``answer.unchanged``), which tool
receipts it holds, and the run's lifecycle. It is never a source of answer views:
nothing here feeds :mod:`imprint.recovery.answer_view`, and a block the journal never
saw stays in the view (R2, R5).

:class:`ExecutionFold` folds the stored events of one run's ``AnswerExecution`` into a
:class:`JournalRun`, one row of a table per event type: :data:`JOURNAL_FACTS` for the
events the inspector and the report compare, :data:`NOT_COMPARED` for every other event
type the journal's store holds (the execution's own and its other aggregates'), each
with why. An event neither names is listed on the run (``unread``), never skipped.
The events come from an adapter that reads the journal's store
(``services.recovery.journal_reader``). No I/O."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from imprint.journal.conditions import QcsIdentity
from imprint.journal.conversation import QUEUE_FACTS, Conversation
from imprint.journal.execution import AnswerExecution
from imprint.journal.leases import LeaseShard
from imprint.journal.redaction import SourceLinks

JournalAvailability = Literal["consulted", "absent", "unavailable"]
"""``consulted``: the journal's store was read; ``absent``: this deployment has no journal
store (no journal ever ran); ``unavailable``: it could not be read (the reason says why)."""


@dataclass(frozen=True, slots=True)
class JournalRun:
    run_id: str
    found: bool
    """Whether the journal holds an execution for this run at all."""
    state: str | None = None
    outcome: str | None = None
    erased: bool = False
    transitions: tuple[dict[str, Any], ...] = ()
    """``{state, at, reason}`` in order."""
    effects: tuple[dict[str, Any], ...] = ()
    """``{kind, candidate_id, block_id, revision, body_sha256, receipt_id, log_position, at}``."""
    receipts: tuple[dict[str, Any], ...] = ()
    """``{tool_call_id, status, at}`` in order."""
    refusals: tuple[dict[str, Any], ...] = ()
    """``{message_type, code, detail, at}`` in order: what the journal refused about the run (X2),
    e.g. what its runtime sent after the run was closed (X10)."""
    lapsed: str | None = None
    """X10: why the journal closed the run when its lease lapsed (``runtime_lost``), if it did."""
    stop_requested: str | None = None
    """X11: when the run's user asked it to stop while it was open (RFC 3339), if they did."""
    interrupted_by: str | None = None
    """X12: the newer question of the conversation that stopped the run, if one did."""
    steered: tuple[str, ...] = ()
    """X12: the questions handed to the run while it ran (their run ids)."""
    unread: tuple[str, ...] = ()
    """Stored event types of the run that no table row names (newer than this code), in order."""

    def journaled(self) -> frozenset[tuple[str, int]]:
        """The (block_id, revision) pairs whose commit the journal observed."""
        return frozenset((e["block_id"], e["revision"]) for e in self.effects)

    def tool_receipts(self) -> dict[str, str]:
        """tool_call_id → the latest receipt status the journal recorded."""
        latest: dict[str, str] = {}
        for receipt in self.receipts:
            latest[receipt["tool_call_id"]] = receipt["status"]
        return latest

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "found": self.found, "state": self.state, "outcome": self.outcome,
                "erased": self.erased, "transitions": list(self.transitions), "effects": list(self.effects),
                "receipts": list(self.receipts), "refusals": list(self.refusals), "lapsed": self.lapsed,
                "stop_requested": self.stop_requested, "interrupted_by": self.interrupted_by,
                "steered": list(self.steered), "unread": list(self.unread)}


Fold = TypeVar("Fold")


EventReader = Callable[[Fold, Any], None]
"""A fold's method for one stored event type: one row of the fold's table."""


def read_event(fold: Fold, rows: Mapping[type, EventReader[Fold]], event: Any, unread: list[str],
               passed: Container[type] = ()) -> None:
    """One stored event read by its type's row of ``rows``; a type no row names and ``passed``
    does not list is named in ``unread`` (newer than this code), never skipped."""
    row = rows.get(type(event))
    if row is not None:
        row(fold, event)
    elif type(event) not in passed:
        unread.append(type(event).__qualname__)


def event_time(event: Any) -> str:
    """A stored event's time (RFC 3339), as recovery's documents show it."""
    return event.timestamp.isoformat()  # type: ignore[no-any-return]


def refusal(event: Any) -> dict[str, Any]:
    """X2: a message the journal refused (an execution's or a conversation's ``Refused``), with its typed code."""
    return {"message_type": event.message_type, "code": event.code, "detail": event.detail, "at": event_time(event)}


class ExecutionFold:
    """One run's execution events, in stream order, folded into a :class:`JournalRun`."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.found = False
        self.state: str | None = None
        self.outcome: str | None = None
        self.erased = False
        self.lapsed: str | None = None
        self.stop_requested: str | None = None
        self.interrupted_by: str | None = None
        self.steered: list[str] = []
        self.transitions: list[dict[str, Any]] = []
        self.effects: list[dict[str, Any]] = []
        self.receipts: list[dict[str, Any]] = []
        self.refusals: list[dict[str, Any]] = []
        self.unread: list[str] = []

    @classmethod
    def of(cls, run_id: str, events: Iterable[Any]) -> JournalRun:
        fold = cls(run_id)
        for event in events:
            fold.apply(event)
        return fold.run()

    def apply(self, event: Any) -> None:
        read_event(self, JOURNAL_FACTS, event, self.unread, NOT_COMPARED)

    def run(self) -> JournalRun:
        return JournalRun(
            run_id=self.run_id, found=self.found, state=self.state, outcome=self.outcome, erased=self.erased,
            transitions=tuple(self.transitions), effects=tuple(self.effects), receipts=tuple(self.receipts),
            refusals=tuple(self.refusals), lapsed=self.lapsed, stop_requested=self.stop_requested,
            interrupted_by=self.interrupted_by, steered=tuple(self.steered), unread=tuple(self.unread),
        )

    # One method per compared event type (:data:`JOURNAL_FACTS`), each reading the event's own
    # fields as the execution applied them.

    def opened(self, event: Any) -> None:
        """The journal holds an execution for the run (admitted or not yet)."""
        self.found = True

    def admitted(self, event: Any) -> None:
        """X1: the run's first lifecycle state."""
        self._enter("admitted", event, None)

    def transitioned(self, event: Any) -> None:
        """X2: one lifecycle transition; a completion carries its outcome."""
        self._enter(event.state, event, event.reason)
        if event.outcome is not None:
            self.outcome = event.outcome

    def _enter(self, state: str, event: Any, reason: str | None) -> None:
        self.state = state
        self.transitions.append({"state": state, "at": event_time(event), "reason": reason})

    def effect_observed(self, event: Any) -> None:
        """P19: a publication effect the journal observed; compared with the log's commits (R2)."""
        self.effects.append({"kind": event.kind, "candidate_id": event.candidate_id, "block_id": event.block_id,
                             "revision": event.revision, "body_sha256": event.body_sha256,
                             "receipt_id": event.receipt_id, "log_position": event.log_position,
                             "at": event_time(event)})

    def tool_receipt_recorded(self, event: Any) -> None:
        """P19: the runtime's tool receipt; the report lists settled effects that lack one (R7)."""
        self.receipts.append({"tool_call_id": event.tool_call_id, "status": event.status, "at": event_time(event)})

    def refused(self, event: Any) -> None:
        """X2: a message the journal refused about the run, with its typed code."""
        self.refusals.append(refusal(event))

    def erasure(self, event: Any) -> None:
        """X8: the run's conversation was deleted; its private fields are gone."""
        self.erased = True

    def lease_lapsed(self, event: Any) -> None:
        """X10: the journal closed the run because its runtime fell silent (the ``failed``
        transition follows as its own event)."""
        self.lapsed = event.reason

    def stop_request(self, event: Any) -> None:
        """X11: the run's user asked it to stop while it was open (recorded once)."""
        self.stop_requested = event_time(event)

    def interruption(self, event: Any) -> None:
        """X12: a newer question of the conversation stops the run (a stop request, as X11's)."""
        self.stop_requested = self.stop_requested or event_time(event)
        self.interrupted_by = event.by_run_id

    def steer(self, event: Any) -> None:
        """X12: a newer question was handed to the running run."""
        self.steered.append(event.steered_run_id)


JOURNAL_FACTS: dict[type, EventReader[ExecutionFold]] = {
    AnswerExecution.Opened: ExecutionFold.opened,
    AnswerExecution.Admitted: ExecutionFold.admitted,
    AnswerExecution.Transitioned: ExecutionFold.transitioned,
    AnswerExecution.EffectObserved: ExecutionFold.effect_observed,
    AnswerExecution.ToolReceiptRecorded: ExecutionFold.tool_receipt_recorded,
    AnswerExecution.Refused: ExecutionFold.refused,
    AnswerExecution.Erased: ExecutionFold.erasure,
    AnswerExecution.LeaseLapsed: ExecutionFold.lease_lapsed,
    AnswerExecution.StopRequested: ExecutionFold.stop_request,
    AnswerExecution.Interrupted: ExecutionFold.interruption,
    AnswerExecution.Steered: ExecutionFold.steer,
}
"""The journal's events recovery compares with the Publication log (R2, R5, R7, P19)."""

NOT_COMPARED: dict[type, str] = {
    # The execution's own events that carry nothing the timeline or the report compares.
    AnswerExecution.Closed: "freezes the completion record (X4): the transition before it moved the lifecycle "
                            "already, and the record's text is private (sealed)",
    AnswerExecution.PolicyEnded: "X12: the Journal closes a run whose question never started; the transition "
                                 "after it carries the reason, the conversation's timeline the end",
    AnswerExecution.StageReported: "runtime progress (run.stage): none of the five facts, its detail sealed",
    AnswerExecution.EvidenceGranted: "the journal's copy of a grant, for its completion record; the grants a "
                                     "block stands on are the Publication log's (R1)",
    AnswerExecution.EvidenceRedacted: "X7 marks a tombstoned source in the frozen record; the withdrawals shown "
                                      "are the Publication log's (P21)",
    # The journal's other aggregates: the timeline reads one run's execution, and what each
    # of these means for a run reaches that execution as an event of its own.
    Conversation.Started: "a conversation's journal record begins: no run's fact",
    Conversation.ExecutionBound: "binds a run to its conversation message (X1); the execution carries the binding",
    Conversation.Deleted: "X8: reaches each execution of the conversation as its own Erased",
    Conversation.Refused: "a refused message about the conversation (X2), not about one run",
    **{event: "X12: a fact of the conversation's queue; the conversation's timeline reads it "
              "(imprint.recovery.conversation, inspect --conversation), a run's end is its own transition"
       for event in QUEUE_FACTS},
    SourceLinks.Noted: "which executions cite a source begins: the Journal's fan-out for X7",
    SourceLinks.Linked: "which executions cite a source: the Journal's fan-out for X7",
    SourceLinks.Tombstoned: "reaches each linked execution as its own EvidenceRedacted (X7)",
    LeaseShard.Started: "a shard's lease record begins: the Journal's bookkeeping for X10",
    LeaseShard.Held: "the run's lease is kept on its partition (X10); a lapse reaches the execution as LeaseLapsed",
    LeaseShard.Released: "the run left its partition's leases; its end is the execution's own transition",
    QcsIdentity.Registered: "the question condition set's identity (X3), private to admission: no compared fact",
}
"""Every other event type the journal's store holds, with why recovery compares nothing of it."""

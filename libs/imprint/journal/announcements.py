"""What the journal announces on ``imprint.runs.v1`` for each committed event.

One stored event → at most one message, with a deterministic ``event_id``
(uuid5 of the originator id and version), so a relay that re-reads the log
re-announces the same ids and Delivery dedupes them:

=======================================  ===============================================
``AnswerExecution.Admitted``             ``run.transitioned`` (state admitted, sequence 1)
``AnswerExecution.Transitioned``         ``run.transitioned`` (state, previous, sequence, reason)
``AnswerExecution.StageReported``        ``run.progress``
``AnswerExecution.Closed``               ``run.closed`` — the closed execution record
``AnswerExecution.Erased``               ``conversation.deleted`` (one per run of the conversation)
``AnswerExecution.LeaseLapsed``          ``run.lease_lapsed`` on ``imprint.control.v1`` (X10: for Publication)
``AnswerExecution.Interrupted``          ``run.cancel_requested`` naming the newer question, on
                                         ``imprint.control.v1`` (X12: the runtime stops the run as X11
                                         says; its ``event_id`` is the fact's, which ``run.stopped`` names)
``AnswerExecution.Steered``              ``run.steered`` on ``imprint.control.v1`` (X12: for the runtime)
``AnswerExecution.PolicyEnded``          ``run.ended_by_policy`` on ``imprint.control.v1`` (X12: for Publication)
``Conversation.Question*`` / ``RunInterrupted``   the conversation's fact of the same name on
                                         ``imprint.runs.v1`` (X12, keyed by conversation)
anything else (refusals, receipts, effects, redactions, conversation/QCS/source facts)  ``None``
=======================================  ===============================================

A completion is stored as ``Transitioned(completed)`` then ``Closed`` (same
transaction), so Delivery sees the status change and then the record. The relay
must read committed events (``RuntimeJournal.announcements``), never in-memory
ones: ``run.closed`` only exists once the closed execution is persisted.

Private fields are opened here, at announce time, with the keyring; after the
conversation was shredded they come out as ``None``/``""`` — never as text, never
as an exception. ``generation_unavailable`` is announced with no answer text,
evidence, snapshot or knowledge_version (X6). A reason the Journal wrote itself
(``runtime_lost``, X10; ``stop_requested``, X11) is a code, stored and announced as it is.

Every message goes to the topic whose union holds its type (``topic_of``): all of them
to ``imprint.runs.v1`` but the lease lapse, which is Publication's to hear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from eventsourcing.utils import get_topic

from imprint.contracts.base import Message
from imprint.contracts import conversation as facts
from imprint.contracts.control import RunCancelRequested, RunLeaseLapsed
from imprint.contracts.runs import ConversationDeleted, EvidenceSummaryItem, RunClosed, RunProgress, RunsMessage, RunTransitioned
from imprint.journal import ids
from imprint.journal.conversation import Conversation
from imprint.journal.execution import AnswerExecution
from imprint.journal.records import (
    F_ANSWER,
    F_QUESTION,
    F_REASON,
    F_STAGE_DETAIL,
    AnswerExecutionRequest,
    CompletionRecord,
    title_field,
)
from imprint.journal.lifecycle import JOURNAL_REASONS
from imprint.shredding import FieldSealer, Keyring


def announce(domain_event: Any, keyring: Keyring | FieldSealer) -> Message | None:
    """Map one committed journal event to its message (or ``None``): an ``imprint.runs.v1``
    message, or for a lease lapse ``run.lease_lapsed`` on ``imprint.control.v1``."""
    make = _ANNOUNCERS.get(type(domain_event))
    if make is None:
        return None
    originator: Any = domain_event.originator_id
    common = dict(event_id=ids.announcement_id(originator, domain_event.originator_version), occurred_at=domain_event.timestamp)
    return make(domain_event, _sealer(keyring), common)


def _admitted(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> RunsMessage:
    request = AnswerExecutionRequest.from_dict(domain_event.request)
    return RunTransitioned(
        **common,
        run_id=request.run_id,
        account_id=request.account_id,
        conversation_id=request.conversation_id,
        state="admitted",
        previous=None,
        sequence=1,
    )


def _transitioned(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> RunsMessage:
    run_id = _run_id(domain_event)
    reason = (domain_event.reason if domain_event.reason in JOURNAL_REASONS
              else _open(sealer, domain_event.conversation_id, run_id, F_REASON, domain_event.reason))
    return RunTransitioned(**common, **_run_named(domain_event), state=domain_event.state,
                           previous=domain_event.previous, sequence=domain_event.sequence, reason=reason)


def _stage_reported(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> RunsMessage:
    run_id = _run_id(domain_event)
    return RunProgress(
        **common,
        run_id=run_id,
        account_id=domain_event.account_id,
        stage=domain_event.stage,
        detail=_open(sealer, domain_event.conversation_id, run_id, F_STAGE_DETAIL, domain_event.detail) or "",
    )


def _closed(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> RunsMessage:
    run_id = _run_id(domain_event)
    closed: dict[str, Any] = dict(**common, **_run_named(domain_event), message_id=domain_event.message_id,
                                  state=domain_event.state)
    if domain_event.record is None:
        return RunClosed(**closed)
    record = CompletionRecord.from_dict(domain_event.record)
    if record.outcome == "generation_unavailable":
        return RunClosed(**closed, outcome=record.outcome)  # X6
    redacted = set(domain_event.redacted)
    return RunClosed(
        **closed,
        outcome=record.outcome,  # type: ignore[arg-type]
        answer_text=_open(sealer, domain_event.conversation_id, run_id, F_ANSWER, record.answer_text),
        evidence=[
            EvidenceSummaryItem(
                source_id=i.source_id,
                title=_open(sealer, domain_event.conversation_id, run_id, title_field(n), i.title) or "",
                redacted=i.source_id in redacted,
            )
            for n, i in enumerate(record.items)
        ],
        snapshot_id=record.snapshot_id,
        knowledge_version=record.knowledge_version,
    )


def _erased(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> RunsMessage:
    return ConversationDeleted(**common, **_run_named(domain_event))


def _lease_lapsed(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> Message:
    return RunLeaseLapsed(**common, **_run_named(domain_event), reason=domain_event.reason)


def _interrupted(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> Message:
    return RunCancelRequested(**{**common, "event_id": UUID(domain_event.event_id)}, run_id=_run_id(domain_event),
                              account_id=domain_event.account_id, interrupted_by=domain_event.by_run_id)


def _policy_ended(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> Message:
    return facts.RunEndedByPolicy(**common, **_run_named(domain_event), state=domain_event.state,
                                  end=domain_event.end)


def _steered(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> Message:
    return facts.RunSteered(**common, **_run_named(domain_event), steered_run_id=domain_event.steered_run_id,
                            message_id=domain_event.message_id,
                            question=_open(sealer, domain_event.conversation_id, domain_event.steered_run_id,
                                           F_QUESTION, domain_event.question))


Announcer = Callable[[Any, FieldSealer, dict[str, Any]], Message]


def _queue_fact(message: type[facts.ConversationFact], *fields: str) -> Announcer:
    """A conversation's queue fact (X12): the stored event's queue, sequence and ``fields``."""

    def make(domain_event: Any, sealer: FieldSealer, common: dict[str, Any]) -> Message:
        # a user's request is the fact's own event id
        extra = {name: UUID(domain_event.event_id) if name == "request_id" else getattr(domain_event, name)
                 for name in fields}
        if "question" in extra:  # a merged question, sealed for its own run
            extra["question"] = _open(sealer, domain_event.conversation_id, domain_event.run_id, F_QUESTION,
                                      extra["question"])
        return message(**common, conversation_id=domain_event.conversation_id, account_id=domain_event.account_id,
                       run_id=domain_event.run_id, message_id=domain_event.message_id,
                       sequence=domain_event.sequence, running=list(domain_event.running),
                       queued=list(domain_event.queued), **extra)

    return make


_ANNOUNCERS: dict[type, Callable[[Any, FieldSealer, dict[str, Any]], Message]] = {
    AnswerExecution.Interrupted: _interrupted,
    AnswerExecution.Steered: _steered,
    AnswerExecution.PolicyEnded: _policy_ended,
    Conversation.QuestionQueued: _queue_fact(facts.QuestionQueued, "policy"),
    Conversation.QuestionStarted: _queue_fact(facts.QuestionStarted, "policy", "merged"),
    Conversation.QuestionRefused: _queue_fact(facts.QuestionRefused, "policy", "reason", "detail"),
    Conversation.QuestionCancelled: _queue_fact(facts.QuestionCancelled, "request_id"),
    Conversation.QuestionSentNow: _queue_fact(facts.QuestionSentNow, "request_id"),
    Conversation.QuestionMerged: _queue_fact(facts.QuestionMerged, "into_run_id", "question"),
    Conversation.QuestionSteered: _queue_fact(facts.QuestionSteered, "into_run_id"),
    Conversation.RunInterrupted: _queue_fact(facts.RunInterrupted, "by_run_id"),
    Conversation.QuestionEnded: _queue_fact(facts.QuestionEnded, "end", "state", "reason"),
    AnswerExecution.Admitted: _admitted,
    AnswerExecution.Transitioned: _transitioned,
    AnswerExecution.StageReported: _stage_reported,
    AnswerExecution.Closed: _closed,
    AnswerExecution.Erased: _erased,
    AnswerExecution.LeaseLapsed: _lease_lapsed,
}
ANNOUNCED_TOPICS = tuple(get_topic(event_class) for event_class in _ANNOUNCERS)
"""The stored topics of the events that announce something: the relay reads only these."""


def _sealer(keyring_or_sealer: Keyring | FieldSealer) -> FieldSealer:
    return keyring_or_sealer if isinstance(keyring_or_sealer, FieldSealer) else FieldSealer(keyring_or_sealer)


def _open(sealer: FieldSealer, conversation_id: str, run_id: str, field: str, sealed: str | None) -> str | None:
    value = sealer.open(conversation_id, run_id, field, sealed)
    return value if isinstance(value, str) else None


def _run_id(domain_event: Any) -> str:
    return str(domain_event.run_id)


def _run_named(domain_event: Any) -> dict[str, Any]:
    """What a run's message names: the run, its account and its conversation (what every
    :class:`~imprint.journal.execution.RunEvent` and ``Closed`` carry)."""
    return {"run_id": _run_id(domain_event), "account_id": domain_event.account_id,
            "conversation_id": domain_event.conversation_id}

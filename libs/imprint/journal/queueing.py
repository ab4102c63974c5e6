"""X12 — what the conversation's policy does to its runs, in one unit of work.

:mod:`imprint.journal.queue` decides; this module records each decision on the
:class:`~imprint.journal.conversation.Conversation` (the queue's facts) and on the runs it
names (:class:`~imprint.journal.execution.AnswerExecution`): a refused, cancelled, merged or
steered question's run is closed by the Journal (:meth:`AnswerExecution.close`), a running
run a newer question interrupts is asked to stop through X11 (:meth:`AnswerExecution.interrupt`,
announced as ``run.cancel_requested`` naming that question), a steered question is handed to
the running run (:meth:`AnswerExecution.steer`, announced as ``run.steered``). When a run of the
queue ends (:func:`ended`: after every lifecycle message, and after a lease lapse) the question
whose turn came starts.

Runs bound before X12 were never queued: they hold no place in the queue, and their end
changes nothing here.
"""

from __future__ import annotations

from imprint.journal import ids
from imprint.journal.conversation import Conversation
from imprint.journal.execution import AnswerExecution
from imprint.journal.lifecycle import (
    CANCELLED,
    CONVERSATION_BUSY,
    INTERRUPTED,
    MERGED,
    STEERED,
    State,
)
from imprint.journal.queue import (
    Enqueue,
    Interrupt,
    Merge,
    Refuse,
    Start,
    Steer,
    check_turn,
    check_waiting,
    decide,
    next_to_start,
)
from imprint.journal.refusals import Refusal
from imprint.workspace import Workspace

JOURNAL_ENDS = {CONVERSATION_BUSY: "refused", CANCELLED: "cancelled", MERGED: "merged", STEERED: "steered",
                INTERRUPTED: "interrupted"}


def end_of(execution: AnswerExecution) -> str:
    """How a closed run's question ended (:data:`imprint.contracts.conversation.QuestionEnd`)."""
    state = execution.state
    reason = execution.transitions[-1].reason if execution.transitions else None
    if state is State.COMPLETED:
        return "answered"
    if reason in JOURNAL_ENDS:
        return JOURNAL_ENDS[reason]
    if state is State.REJECTED:
        return "refused"
    return "stopped" if state is State.STOPPED else "failed"


def _execution(ws: Workspace, run_id: str) -> AnswerExecution | None:
    return ws.get(AnswerExecution, ids.execution_id(run_id))


def admitted(ws: Workspace, conv: Conversation, ex: AnswerExecution, event_id: str, policy: str) -> None:
    """The question of the run ``ex`` just admitted (``event_id``) meets its conversation's queue."""
    run_id = ex.run_id
    decision = decide(conv.queue, run_id, policy)
    match decision:
        case Start():
            conv.record_started(event_id, run_id, policy)
        case Enqueue(front=front):
            conv.record_queued(event_id, run_id, policy, front)
        case Interrupt(running=running):
            conv.record_queued(event_id, run_id, policy, front=True)
            _interrupt(ws, conv, event_id, running, run_id)
        case Refuse(busy=busy):
            conv.record_refused(event_id, run_id, policy, CONVERSATION_BUSY, "busy with " + ", ".join(busy))
            _close(conv, ex, event_id, State.REJECTED, CONVERSATION_BUSY)
        case Merge(into=into):
            question = ex.request.question if ex.request else None
            conv.record_merged(event_id, run_id, into, question)
            _close(conv, ex, event_id, State.STOPPED, MERGED)
        case Steer(into=into):
            conv.record_steered(event_id, run_id, into)
            running = _execution(ws, into)
            if running is not None and ex.request is not None:
                running.steer(ids.steer_id(into, run_id), run_id, ex.request.message_id, ex.request.question)
            _close(conv, ex, event_id, State.STOPPED, STEERED)


def ended(ws: Workspace, run_id: str, event_id: str) -> None:
    """After a lifecycle message (or a lapse) of ``run_id``: a run of its conversation's queue
    that closed ends its question, and the question whose turn came starts."""
    ex = _execution(ws, run_id)
    if ex is None or ex.state is None or ex.state not in _CLOSED or ex.conversation_id is None:
        return
    conv = ws.get(Conversation, ids.conversation_id(ex.conversation_id))
    if conv is None or not conv.queue.holds(run_id):
        return
    conv.record_ended(event_id, run_id, end_of(ex), ex.state.value, ex.transitions[-1].reason)
    _start_next(conv, event_id)


def check_started_in_turn(ws: Workspace, ex: AnswerExecution) -> None:
    """Raise a :class:`Refusal` for a ``run.started`` of a question still queued."""
    if ex.conversation_id is None:
        return
    conv = ws.get(Conversation, ids.conversation_id(ex.conversation_id))
    if conv is not None:
        check_turn(conv.queue, ex.run_id)


def cancel(ws: Workspace, conv: Conversation, event_id: str, run_id: str, message_type: str) -> None:
    """The user cancels the queued question ``run_id`` (``event_id``: their request)."""
    if not _waiting(conv, event_id, run_id, message_type):
        return
    conv.record_cancelled(event_id, run_id)
    ex = _execution(ws, run_id)
    if ex is not None:
        ex.close(event_id, State.STOPPED, CANCELLED, "cancelled")
    conv.record_ended(event_id, run_id, "cancelled", State.STOPPED.value, CANCELLED)
    _start_next(conv, event_id)


def send_now(ws: Workspace, conv: Conversation, event_id: str, run_id: str, message_type: str) -> None:
    """The user sends the queued question ``run_id`` now: to the front, and what runs is interrupted."""
    if not _waiting(conv, event_id, run_id, message_type):
        return
    conv.record_sent_now(event_id, run_id)
    _interrupt(ws, conv, event_id, conv.queue.running, run_id)
    _start_next(conv, event_id)


# -- internals ------------------------------------------------------------------------------------

_CLOSED = frozenset({State.COMPLETED, State.STOPPED, State.FAILED, State.THROTTLED, State.REJECTED})


def _waiting(conv: Conversation, event_id: str, run_id: str, message_type: str) -> bool:
    if event_id in conv.processed:
        return False
    try:
        check_waiting(conv.queue, run_id, message_type, conv.ended.get(run_id))
    except Refusal as refusal:
        conv.refuse(event_id, message_type, refusal)
        return False
    return True


def _interrupt(ws: Workspace, conv: Conversation, event_id: str, running: tuple[str, ...], by_run_id: str) -> None:
    for run_id in running:
        target = _execution(ws, run_id)
        if target is not None and target.interrupt(ids.interruption_id(run_id, by_run_id), by_run_id):
            conv.record_interrupted(event_id, run_id, by_run_id)


def _close(conv: Conversation, ex: AnswerExecution, event_id: str, target: State, reason: str) -> None:
    ex.close(event_id, target, reason, JOURNAL_ENDS[reason])
    conv.record_ended(event_id, ex.run_id, JOURNAL_ENDS[reason], target.value, reason)


def _start_next(conv: Conversation, event_id: str) -> None:
    if (run_id := next_to_start(conv.queue)) is not None:
        conv.record_started(event_id, run_id, conv.policies.get(run_id, "enqueue"))

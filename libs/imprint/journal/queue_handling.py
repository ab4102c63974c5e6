"""X12 — the handling table's rows of the conversation's queue.

:mod:`imprint.journal.handling` keeps the one table; these are the queue's rows in it: the user's
request on a queued question (:func:`question_request`), a ``run.started`` checked against the
question's turn (:func:`in_turn`: one still queued is refused, ``not_its_turn``), and a lifecycle
message that closes a run of the queue, which ends its question and starts the next
(:func:`ending`). An admission meets its conversation's queue in the admission handler itself
(:func:`imprint.journal.queueing.admitted`), under its policy (the runtime's, or the deployment's,
:attr:`Context.policy`). :mod:`imprint.journal.queueing` records what each decides.
"""

from __future__ import annotations

from typing import Any

from imprint.contracts.conversation import QuestionCancelRequested, QuestionRequest
from imprint.journal import ids, queueing
from imprint.journal.conversation import Conversation
from imprint.journal.effects import NOTHING, Context, Effects, Handler, execution_of
from imprint.journal.lifecycle import State
from imprint.journal.refusals import Refusal
from imprint.workspace import Workspace


def question_request(ws: Workspace, m: QuestionRequest, context: Context) -> Effects:
    """The user cancels, or sends now, a queued question of their conversation."""
    conv = ws.get(Conversation, ids.conversation_id(m.conversation_id))
    if conv is None:
        return NOTHING  # no such conversation: Delivery answered 404, nothing to record it on
    eid = str(m.event_id)
    try:
        conv.check_admission(m.account_id)
    except Refusal as r:
        conv.refuse(eid, m.type, r)
        return NOTHING
    act = queueing.cancel if isinstance(m, QuestionCancelRequested) else queueing.send_now
    act(ws, conv, eid, m.run_id, m.type)
    return NOTHING


def in_turn(handler: Handler) -> Handler:
    """A ``run.started``'s handler, after X12: a question still queued may not start."""

    def checked(ws: Workspace, message: Any, context: Context) -> Effects:
        ex = execution_of(ws, message.run_id)
        eid = str(message.event_id)
        if not ex.has_seen(eid) and not ex.erased and ex.state in (State.ADMITTED, State.QUEUED):
            try:
                queueing.check_started_in_turn(ws, ex)
            except Refusal as r:
                ex.refuse(eid, message.type, r)
                return NOTHING
        return handler(ws, message, context)

    return checked


def ending(handler: Handler) -> Handler:
    """A lifecycle message's handler, then X12: a run of its conversation's queue that closed
    ends its question, and the next question's turn comes (:func:`queueing.ended`)."""

    def then_next(ws: Workspace, message: Any, context: Context) -> Effects:
        effects = handler(ws, message, context)
        queueing.ended(ws, message.run_id, str(message.event_id))
        return effects

    return then_next

"""X12 — a conversation's policy for a question that arrives while another is live or queued.

Three kinds of wire models, one module, so the Journal, Delivery and the runtime SDK read one
definition:

* :data:`ConversationPolicy` — what the runtime chose at admission (``run.admitted.policy``;
  absent: the deployment default ``IMPRINT_CONVERSATION_POLICY``, ``enqueue`` unless set;
  a message or record from before the field reads as that default).
* the conversation's **facts** (Journal → Delivery and the runtime SDK, on ``imprint.runs.v1``,
  keyed by ``conversation_id`` so one conversation's facts keep their order in one partition):
  a question queued, started, refused with its reason, cancelled by its user, merged into a
  queued one, steered into the live run, sent now; a live run interrupted by a newer question;
  a question ended. Each carries the conversation's ``sequence`` (1, 2, … per conversation:
  a reader resumes after the last it saw) and the queue as it stands after the fact
  (``running``, then ``queued`` in the order they will start), so the newest fact alone shows
  the whole queue.
* the user's **requests** (Delivery's HTTP API → the Journal, on ``imprint.control.v1``):
  cancel a queued question, send it now. Each is recorded; once the question started it is
  refused (``question_started``), never silently dropped. And the Journal's hand-over of a
  steered question to the live run's runtime (``run.steered``, on ``imprint.control.v1``
  keyed by the live run, as a stop request travels), and its word to Publication that it closed a
  run whose question never started (``run.ended_by_policy``).

An interruption travels to the runtime as the stop it is: ``run.cancel_requested`` naming the
newer question (``interrupted_by``), so the runtime SDK stops the run through X11 unchanged.
"""

from __future__ import annotations

import uuid
from typing import ClassVar, Literal

from pydantic import Field

from imprint.contracts.base import Identifier, Message

ConversationPolicy = Literal["concurrent", "reject", "enqueue", "interrupt", "merge", "steer"]
"""What a new question does while another question of its conversation is live or queued:

* ``concurrent`` — it starts at once, beside the others (the behaviour before X12);
* ``reject`` — it is refused (``conversation_busy``) and its run ends ``rejected``;
* ``enqueue`` — it waits; it starts when every question before it has ended;
* ``interrupt`` — the running question is stopped (X11, caused by this one); this one starts
  once it ended;
* ``merge`` — folded into the last question that is queued and not started (its run answers
  both; the merged run ends ``stopped``, reason ``merged``); with none queued, as ``enqueue``;
* ``steer`` — handed to the running question's runtime (``run.steered``); its own run ends
  ``stopped``, reason ``steered``; with none running, as ``enqueue``."""

POLICIES: tuple[str, ...] = ("concurrent", "reject", "enqueue", "interrupt", "merge", "steer")
DEFAULT_POLICY: ConversationPolicy = "enqueue"

QuestionEnd = Literal["answered", "stopped", "failed", "refused", "cancelled", "merged", "steered", "interrupted"]
"""How a question ended (X12: never a silent drop): its run ``completed`` (``answered``,
whatever the outcome), ``stopped`` by its user, ``interrupted`` by a newer question,
``failed`` (or throttled), ``refused`` by the policy, ``cancelled`` by its user while queued,
``merged`` into a queued question, ``steered`` into the running one."""

RefusalReason = Literal["conversation_busy"]


class ConversationFact(Message):
    """One fact of a conversation's queue, with the queue after it."""

    conversation_id: Identifier
    account_id: Identifier
    run_id: Identifier
    """The question this fact is about (its run)."""
    message_id: Identifier
    """The user message the run is bound to (X1)."""
    sequence: int = Field(ge=1)
    """This fact's number in its conversation (1, 2, …)."""
    running: list[Identifier] = []
    """The conversation's started, not yet ended questions (run ids) after this fact."""
    queued: list[Identifier] = []
    """The conversation's waiting questions (run ids) after this fact, in the order they start."""

    key_field: ClassVar[str | None] = "conversation_id"


class QuestionQueued(ConversationFact):
    """The question was admitted and waits for the questions before it (``enqueue``, ``merge``,
    ``steer`` with nothing to fold into, ``interrupt`` while the interrupted run ends)."""

    type: Literal["conversation.question_queued"] = "conversation.question_queued"
    policy: ConversationPolicy


class QuestionStarted(ConversationFact):
    """The question's turn came: its run may start now (the runtime SDK's ``start()`` returns).
    ``merged``: questions folded into it (their run ids), which its run answers too."""

    type: Literal["conversation.question_started"] = "conversation.question_started"
    policy: ConversationPolicy
    merged: list[Identifier] = []


class QuestionRefused(ConversationFact):
    """``reject``: the question was refused and its run ended ``rejected`` with ``reason``
    (the runtime SDK raises it as :class:`~imprint.runtime.turns.RunRefused`)."""

    type: Literal["conversation.question_refused"] = "conversation.question_refused"
    policy: ConversationPolicy
    reason: RefusalReason = "conversation_busy"
    detail: str = ""
    """Which questions were live or queued (run ids), for the user."""


class QuestionCancelled(ConversationFact):
    """Its user cancelled the queued question; its run ended ``stopped``, reason ``cancelled``."""

    type: Literal["conversation.question_cancelled"] = "conversation.question_cancelled"
    request_id: uuid.UUID
    """The ``event_id`` of the user's ``question.cancel_requested``."""


class QuestionSentNow(ConversationFact):
    """Its user moved the queued question to the front and interrupted what was running
    (each interruption follows as :class:`RunInterrupted`)."""

    type: Literal["conversation.question_sent_now"] = "conversation.question_sent_now"
    request_id: uuid.UUID


class QuestionMerged(ConversationFact):
    """``merge``: the question was folded into ``into_run_id`` (queued, not started), which
    answers it; its own run ended ``stopped``, reason ``merged``. Its message id stays bound to
    its own run (X1). ``question``: its text, for the runtime that answers both (private: none
    once the conversation was deleted)."""

    type: Literal["conversation.question_merged"] = "conversation.question_merged"
    into_run_id: Identifier
    question: str | None = None


class QuestionSteered(ConversationFact):
    """``steer``: the question was handed to the running ``into_run_id`` (``run.steered``);
    its own run ended ``stopped``, reason ``steered``."""

    type: Literal["conversation.question_steered"] = "conversation.question_steered"
    into_run_id: Identifier


class RunInterrupted(ConversationFact):
    """``interrupt`` (or a send-now): the running question ``run_id`` is being stopped
    through X11 because of the newer question ``by_run_id``; its stop is recorded with reason
    ``interrupted``, and ``by_run_id`` starts once it ended."""

    type: Literal["conversation.run_interrupted"] = "conversation.run_interrupted"
    by_run_id: Identifier


class QuestionEnded(ConversationFact):
    """The question's run closed (or the question was refused, cancelled, merged, steered):
    how it ended. Every admitted question gets exactly one (X12: never a silent drop)."""

    type: Literal["conversation.question_ended"] = "conversation.question_ended"
    end: QuestionEnd
    state: Literal["completed", "stopped", "failed", "throttled", "rejected"]
    reason: str | None = None


# -- the user's requests (Delivery → Journal, imprint.control.v1) -------------------------------


class QuestionRequest(Message):
    """A user's request about one queued question of a conversation their account owns."""

    conversation_id: Identifier
    account_id: Identifier
    run_id: Identifier
    key_field: ClassVar[str | None] = "conversation_id"


class QuestionCancelRequested(QuestionRequest):
    """Cancel the queued question: recorded as :class:`QuestionCancelled`; refused
    (``question_started``) once it started."""

    type: Literal["question.cancel_requested"] = "question.cancel_requested"


class QuestionSendNowRequested(QuestionRequest):
    """Send the queued question now: recorded as :class:`QuestionSentNow` (and the running
    questions interrupted); refused (``question_started``) once it started."""

    type: Literal["question.send_now_requested"] = "question.send_now_requested"


# -- the Journal's hand-over of a steered question (Journal → runtime, imprint.control.v1) --------


class RunSteered(Message):
    """``steer``: a newer question of the conversation for the running ``run_id``; the runtime
    SDK surfaces it to the agent. ``question`` is private (none once the conversation was
    deleted)."""

    type: Literal["run.steered"] = "run.steered"
    run_id: Identifier
    account_id: Identifier
    conversation_id: Identifier
    steered_run_id: Identifier
    message_id: Identifier
    question: str | None = None
    key_field: ClassVar[str | None] = "run_id"


class RunEndedByPolicy(Message):
    """The Journal closed the run because its conversation's policy ended its question before it
    started (refused, cancelled, merged, steered): Publication ends the run too (``answer.settled``
    follows, so Delivery ends its streams), as it does on a lease lapse (X10). On
    ``imprint.control.v1``, keyed by the run."""

    type: Literal["run.ended_by_policy"] = "run.ended_by_policy"
    run_id: Identifier
    account_id: Identifier
    conversation_id: Identifier
    state: Literal["rejected", "stopped"]
    end: QuestionEnd
    key_field: ClassVar[str | None] = "run_id"


CONVERSATION_FACTS = (QuestionQueued, QuestionStarted, QuestionRefused, QuestionCancelled, QuestionSentNow,
                      QuestionMerged, QuestionSteered, RunInterrupted, QuestionEnded)
"""The facts on ``imprint.runs.v1``, in the runs union."""

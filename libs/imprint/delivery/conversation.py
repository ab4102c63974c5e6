"""D9: the conversation stream — what every tab of one conversation is told, in one order.

A conversation's stream is a resumable list of **entries**, ids 1, 2, 3, … per conversation
(``GET /v1/conversations/{id}/events``): a ``turn`` each time one of its questions changes
its place in the conversation (admitted, queued behind another, started, ended, refused with
its reason, cancelled by its user, merged into another, handed to the live run, interrupted
by a newer question), and a copy of every D7 ``notice`` of its runs. Folding the entries in
id order (:func:`fold`) gives every tab the same thing — the runs in the order they were
asked with their states, and the queue — and a refresh that replays them from the start
loses nothing.

A turn carries only ids, states and the Journal's fixed vocabulary (D6): never a body.

Pure: the handler table (:mod:`imprint.delivery.handling`) asks for turns through
:class:`~imprint.delivery.frames.Step`; the store numbers and keeps them with the poll."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from imprint.contracts.stream import TurnData

TURN_EVENT = "turn"
"""The SSE event of a turn (its ``id`` is the entry's id in the conversation)."""
NOTICE_EVENT = "notice"
"""A D7 notice as an entry of the conversation stream (its data: the notice's payload)."""

ENDED_KINDS = frozenset({"ended", "refused", "cancelled", "merged", "steered"})
"""A question whose latest fact is one of these is over (X12: each admitted question ends once)."""
ENDED_STATES = frozenset({"completed", "stopped", "failed", "throttled", "rejected"})
"""A run in one of these lifecycle states is over."""
TRANSITION = "transition"
"""The ``kind`` of a turn that is a run's lifecycle transition (no conversation fact)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One question's place in its conversation changed (before the store numbers it)."""

    conversation_id: str
    run_id: str
    kind: str
    """``transition`` (the run's lifecycle, ``state``), or the Journal's conversation fact:
    ``queued`` ``started`` ``refused`` ``cancelled`` ``sent_now`` ``merged`` ``steered``
    ``interrupted`` ``ended``."""
    state: str | None = None
    """The run's lifecycle state (a transition), or the state its run ended in (``ended``)."""
    message_id: str | None = None
    policy: str | None = None
    reason: str | None = None
    """Why (a refusal's reason, a stop's cause): the Journal's fixed vocabulary."""
    by: str | None = None
    """The other run a fact names: the newer question that interrupted it, the run it was
    merged into or steered to."""
    end: str | None = None
    """How the question ended (``ended``): answered, stopped, interrupted, refused, …"""
    sequence: int = 0
    """The fact's number in its conversation; a transition's in its run."""
    running: tuple[str, ...] | None = None
    """After a fact: the conversation's started questions, not yet ended."""
    queued: tuple[str, ...] | None = None
    """After a fact: its waiting questions, in the order they start (the queue)."""

    def payload(self, entry_id: int, at: str) -> dict[str, Any]:
        """What a client receives (client-safe, D6: ids, states and fixed vocabulary), in the
        one wire shape the protocol publishes (:class:`imprint.contracts.stream.TurnData`)."""
        return TurnData(entry_id=entry_id, run_id=self.run_id, kind=self.kind, state=self.state,
                        message_id=self.message_id, policy=self.policy, reason=self.reason, by=self.by,
                        end=self.end, sequence=self.sequence,
                        running=None if self.running is None else list(self.running),
                        queued=None if self.queued is None else list(self.queued), at=at).model_dump(mode="json")


def transitioned(*, run_id: str, conversation_id: str | None, state: str, reason: str | None,
                 sequence: int) -> Turn | None:
    """A run's accepted lifecycle transition as its conversation sees it (none without a
    conversation: there is no stream to carry it)."""
    if conversation_id is None:
        return None
    return Turn(conversation_id=conversation_id, run_id=run_id, kind=TRANSITION, state=state, reason=reason,
                sequence=sequence)


def fact_kind(message_type: str) -> str:
    """A conversation fact's ``kind`` from its type: ``conversation.question_queued`` → ``queued``,
    ``conversation.run_interrupted`` → ``interrupted``."""
    return message_type.split(".", 1)[-1].removeprefix("question_").removeprefix("run_")


def of_fact(message: Any) -> Turn:
    """A conversation fact of the Journal (``imprint.contracts.conversation``, X12) as a turn:
    its question, what happened to it, and the queue after it."""
    return Turn(conversation_id=message.conversation_id, run_id=message.run_id, kind=fact_kind(message.type),
                state=getattr(message, "state", None), message_id=message.message_id,
                policy=getattr(message, "policy", None), reason=getattr(message, "reason", None),
                by=getattr(message, "into_run_id", None) or getattr(message, "by_run_id", None),
                end=getattr(message, "end", None), sequence=message.sequence,
                running=tuple(message.running), queued=tuple(message.queued))


@dataclass
class Question:
    """One question as a tab shows it (:func:`fold`)."""

    run_id: str
    kind: str | None = None
    """Its latest conversation fact (``None``: none yet, e.g. under ``concurrent`` before X12)."""
    state: str | None = None
    """Its run's lifecycle state."""
    message_id: str | None = None
    policy: str | None = None
    reason: str | None = None
    by: str | None = None
    end: str | None = None
    notices: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.kind in ENDED_KINDS or self.state in ENDED_STATES


@dataclass
class ConversationView:
    """What every tab of a conversation shows once it has folded the same entries."""

    questions: list[Question] = field(default_factory=list)
    """Every question, in the order the conversation first heard of it."""
    queue: list[str] = field(default_factory=list)
    """The questions waiting for their turn, in the order they start (the newest fact's)."""
    running: list[str] = field(default_factory=list)
    last_entry_id: int = 0

    def question(self, run_id: str) -> Question | None:
        return next((q for q in self.questions if q.run_id == run_id), None)


def fold(entries: Iterable[tuple[int, str, dict[str, Any]]], view: ConversationView | None = None) -> ConversationView:
    """Fold (entry id, event, data) in id order into what a tab shows; an entry at or below
    what the view already holds changes nothing. The reference page does the same in
    JavaScript (``services/delivery/static/app.js``)."""
    view = view or ConversationView()
    index = {q.run_id: q for q in view.questions}
    for entry_id, event, data in entries:
        if entry_id <= view.last_entry_id:
            continue
        view.last_entry_id = entry_id
        run_id = str(data.get("run_id"))
        question = index.get(run_id)
        if event == NOTICE_EVENT:
            if question is not None:
                question.notices.append(data)
            continue
        if event != TURN_EVENT:
            continue
        if question is None:
            question = index[run_id] = Question(run_id=run_id)
            view.questions.append(question)
        if data.get("kind") == TRANSITION:
            question.state = data.get("state")
            continue
        question.kind = data.get("kind")
        for name in ("message_id", "policy", "reason", "by", "end"):
            if data.get(name) is not None:
                setattr(question, name, data[name])
        if data.get("kind") == "ended" and data.get("state"):
            question.state = data["state"]
        if data.get("queued") is not None:
            view.queue = [str(r) for r in data["queued"]]
            view.running = [str(r) for r in data.get("running") or []]
    return view

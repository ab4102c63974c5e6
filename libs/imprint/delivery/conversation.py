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

TURN_EVENT = "turn"
"""The SSE event of a turn (its ``id`` is the entry's id in the conversation)."""
NOTICE_EVENT = "notice"
"""A D7 notice as an entry of the conversation stream (its data: the notice's payload)."""

ENDED = frozenset({"completed", "stopped", "failed", "throttled", "rejected", "refused", "cancelled", "merged"})
"""A question in one of these states is no longer live nor waiting."""
WAITING = frozenset({"waiting"})
"""A question admitted behind another of its conversation (its queue)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One question's place in its conversation changed (before the store numbers it)."""

    conversation_id: str
    run_id: str
    state: str
    """``admitted`` ``waiting`` ``queued`` ``running`` … a run's lifecycle state, or the
    conversation's own: ``waiting`` (behind another), ``refused``, ``cancelled``, ``merged``,
    ``steered``."""
    message_id: str | None = None
    policy: str | None = None
    reason: str | None = None
    """Why (a refusal's reason, a stop's cause): the Journal's fixed vocabulary."""
    by: str | None = None
    """The other run it names: the newer question that interrupted it, the run it was merged
    into or steered to."""
    ahead: tuple[str, ...] = ()
    """The runs it waits behind, in order (``waiting`` only)."""
    sequence: int = 0

    def payload(self, entry_id: int, at: str) -> dict[str, Any]:
        """What a client receives (client-safe, D6)."""
        return {"entry_id": entry_id, "run_id": self.run_id, "state": self.state, "message_id": self.message_id,
                "policy": self.policy, "reason": self.reason, "by": self.by, "ahead": list(self.ahead),
                "sequence": self.sequence, "at": at}


def transitioned(*, run_id: str, conversation_id: str | None, state: str, reason: str | None,
                 sequence: int) -> Turn | None:
    """A run's accepted lifecycle transition as its conversation sees it (none without a
    conversation: there is no stream to carry it)."""
    if conversation_id is None:
        return None
    return Turn(conversation_id=conversation_id, run_id=run_id, state=state, reason=reason, sequence=sequence)


@dataclass
class Question:
    """One question as a tab shows it (:func:`fold`)."""

    run_id: str
    state: str
    message_id: str | None = None
    policy: str | None = None
    reason: str | None = None
    by: str | None = None
    notices: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.state in ENDED


@dataclass
class ConversationView:
    """What every tab of a conversation shows once it has folded the same entries."""

    questions: list[Question] = field(default_factory=list)
    """Every question, in the order the conversation first heard of it."""
    last_entry_id: int = 0

    @property
    def queue(self) -> list[str]:
        """The questions waiting for their turn, in order."""
        return [q.run_id for q in self.questions if q.state in WAITING]

    @property
    def live(self) -> list[str]:
        return [q.run_id for q in self.questions if q.state not in WAITING and not q.ended]


def fold(entries: Iterable[tuple[int, str, dict[str, Any]]], view: ConversationView | None = None) -> ConversationView:
    """Fold (entry id, event, data) in id order into what a tab shows; an entry at or below
    what the view already holds changes nothing (a resumed stream repeats none, but a fold
    must not care). The reference page does the same in JavaScript."""
    view = view or ConversationView()
    index = {q.run_id: q for q in view.questions}
    for entry_id, event, data in entries:
        if entry_id <= view.last_entry_id:
            continue
        view.last_entry_id = entry_id
        run_id = str(data.get("run_id"))
        question = index.get(run_id)
        if event == TURN_EVENT:
            if question is None:
                question = index[run_id] = Question(run_id=run_id, state=str(data["state"]))
                view.questions.append(question)
            if question.ended and str(data["state"]) not in ENDED:
                continue  # an end is final: a late lifecycle echo does not bring a question back
            question.state = str(data["state"])
            for name in ("message_id", "policy", "reason", "by"):
                if data.get(name) is not None:
                    setattr(question, name, data[name])
        elif event == NOTICE_EVENT and question is not None:
            question.notices.append(data)
    return view

"""``imprint inspect --conversation``: one conversation's questions, their policies and how each
ended (X12), folded from the Journal's stored ``Conversation`` events — one row per event type
(:data:`CONVERSATION_FACTS`), so a type without a row is named (``unread``), never skipped.

Each question is one admitted run: its message, the policy it met the queue under, what the
policy did (started, queued, refused, merged into, steered into; interrupted by; cancelled or
sent now by its user) and how it ended. X12 says none is dropped in silence: a question that
has no end and is neither running nor queued is listed under ``unaccounted`` (a run bound
before X12 never met the queue: its policy is ``None`` and it is not counted there).
Ids, codes and times only — never a question's text (X9). No I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from imprint.journal.conversation import QUEUE_FACTS, Conversation
from imprint.recovery.journal_facts import EventReader, event_time, read_event, refusal


@dataclass
class Question:
    run_id: str
    message_id: str
    bound_at: str
    policy: str | None = None
    decision: str | None = None
    """``started``, ``queued``, ``refused``, ``merged``, ``steered`` (what the policy did on admission)."""
    started_at: str | None = None
    merged: list[str] = field(default_factory=list)
    into: str | None = None
    """The question it was merged or steered into."""
    interrupted_by: str | None = None
    cancelled_at: str | None = None
    sent_now_at: str | None = None
    end: str | None = None
    state: str | None = None
    reason: str | None = None
    ended_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ConversationFold:
    """A conversation's stored events, in order, folded into its timeline."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.found = False
        self.account_id: str | None = None
        self.questions: dict[str, Question] = {}
        self.facts: list[dict[str, Any]] = []
        self.refusals: list[dict[str, Any]] = []
        self.deleted: str | None = None
        self.running: list[str] = []
        self.queued: list[str] = []
        self.unread: list[str] = []

    @classmethod
    def of(cls, conversation_id: str, events: Iterable[Any]) -> dict[str, Any]:
        fold = cls(conversation_id)
        for event in events:
            read_event(fold, CONVERSATION_FACTS, event, fold.unread)
        return fold.document()

    def document(self) -> dict[str, Any]:
        waiting = set(self.running) | set(self.queued)
        unaccounted = [q.run_id for q in self.questions.values()
                       if q.policy is not None and q.end is None and q.run_id not in waiting]
        return {"conversation_id": self.conversation_id, "found": self.found, "account_id": self.account_id,
                "deleted": self.deleted, "questions": [q.to_json() for q in self.questions.values()],
                "running": list(self.running), "queued": list(self.queued), "facts": self.facts,
                "refusals": self.refusals, "unaccounted": unaccounted, "unread": self.unread}

    # -- one method per stored event type -------------------------------------------------------

    def started(self, event: Any) -> None:
        self.found = True
        self.account_id = event.account_id

    def bound(self, event: Any) -> None:
        self.questions.setdefault(event.run_id, Question(event.run_id, event.message_id, event_time(event)))

    def deleted_(self, event: Any) -> None:
        self.deleted = event_time(event)

    def refused(self, event: Any) -> None:
        self.refusals.append(refusal(event))

    def queue_fact(self, event: Any) -> None:
        """X12: one fact of the queue; the question it names, and the queue after it."""
        name = type(event).__name__
        q = self.questions.setdefault(event.run_id, Question(event.run_id, event.message_id, event_time(event)))
        at = event_time(event)
        detail = _DETAIL.get(name, lambda e: None)(event)
        self.facts.append({"sequence": event.sequence, "at": at, "fact": name, "run_id": event.run_id,
                           "detail": detail})
        self.running, self.queued = list(event.running), list(event.queued)
        if name in ("QuestionQueued", "QuestionStarted", "QuestionRefused") and q.policy is None:
            q.policy = event.policy
        elif name in _IMPLIED_POLICY and q.policy is None:
            q.policy = _IMPLIED_POLICY[name]
        if q.decision is None and name in _DECISIONS:
            q.decision = _DECISIONS[name]
        if name == "QuestionStarted":
            q.started_at, q.merged = at, list(event.merged)
        elif name in ("QuestionMerged", "QuestionSteered"):
            q.into = event.into_run_id
        elif name == "RunInterrupted":
            q.interrupted_by = event.by_run_id
        elif name == "QuestionCancelled":
            q.cancelled_at = at
        elif name == "QuestionSentNow":
            q.sent_now_at = at
        elif name == "QuestionEnded":
            q.end, q.state, q.reason, q.ended_at = event.end, event.state, event.reason, at


_DECISIONS = {"QuestionStarted": "started", "QuestionQueued": "queued", "QuestionRefused": "refused",
              "QuestionMerged": "merged", "QuestionSteered": "steered"}
_IMPLIED_POLICY = {"QuestionMerged": "merge", "QuestionSteered": "steer"}
"""Only these policies fold or hand a question over: the fact names its policy."""
_DETAIL: dict[str, Callable[[Any], str | None]] = {
    "QuestionQueued": lambda e: f"policy {e.policy}",
    "QuestionStarted": lambda e: f"policy {e.policy}" + (f", answers {', '.join(e.merged)} too" if e.merged else ""),
    "QuestionRefused": lambda e: f"{e.reason}: {e.detail}",
    "QuestionMerged": lambda e: f"into {e.into_run_id}",
    "QuestionSteered": lambda e: f"into {e.into_run_id}",
    "RunInterrupted": lambda e: f"by {e.by_run_id}",
    "QuestionEnded": lambda e: f"{e.end} ({e.state}{', ' + e.reason if e.reason else ''})",
}

CONVERSATION_FACTS: dict[type, EventReader[ConversationFold]] = {
    Conversation.Started: ConversationFold.started,
    Conversation.ExecutionBound: ConversationFold.bound,
    Conversation.Deleted: ConversationFold.deleted_,
    Conversation.Refused: ConversationFold.refused,
    **{event: ConversationFold.queue_fact for event in QUEUE_FACTS},
}
"""Every event type a ``Conversation`` stores, and how the conversation's timeline reads it."""

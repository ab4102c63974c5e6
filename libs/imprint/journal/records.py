"""The records an ``AnswerExecution`` holds and stores: the private request (X1), the frozen
completion (X4), and one value per fact the run's events append (refusals, transitions, stages,
grants, receipts and effects — P19). Values only: the aggregate that appends them is
:mod:`imprint.journal.execution`. Private fields are sealed strings (:mod:`imprint.shredding`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from imprint.journal.lifecycle import State

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
        record: dict[str, Any] = {"schema": REQUEST_SCHEMA}
        for name in REQUEST_FIELDS:
            (record.setdefault("qcs", {}) if name in QCS_FIELDS else record)[name] = _copied(getattr(self, name))
        return record

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnswerExecutionRequest:
        q = d["qcs"]
        return cls(**{name: _copied((q if name in QCS_FIELDS else d)[name]) for name in REQUEST_FIELDS})


REQUEST_FIELDS = tuple(f.name for f in fields(AnswerExecutionRequest))
"""The request's fields in their record's order: one list for :meth:`~AnswerExecutionRequest.to_dict`
and :meth:`~AnswerExecutionRequest.from_dict`."""
QCS_FIELDS = frozenset({"qcs_id", "inherits_from", "conditions", "condition_count", "condition_sources"})
"""The request's fields its record keeps under ``qcs`` (the question's condition set, X1)."""


def _copied(value: Any) -> Any:
    """A dict value (``condition_sources``) copied, so record and request share no container."""
    return dict(value) if isinstance(value, dict) else value


Text = TypeVar("Text")


@dataclass(frozen=True)
class EvidenceItem(Generic[Text]):
    """One evidence item of a completion: its source, title and excerpt — sealed, as the record
    keeps them (:data:`FrozenItem`), or opened for a reader (``imprint.journal.history.RevealedItem``)."""

    source_id: str
    title: Text | None
    """The title (a private source's title can be as telling as its excerpt), or ``None``."""
    excerpt: Text | None
    """The excerpt, or ``None`` when the runtime gave none."""


FrozenItem = EvidenceItem[str]
"""An evidence item as the frozen record keeps it: title and excerpt are sealed strings."""


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
class StageRecord:
    stage: str
    detail: str | None
    at: datetime
    event_id: str

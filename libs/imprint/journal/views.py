"""Response models of the journal's read side (``services.journal.queries``), for the HTTP layer.

``display`` is what a client may present; ``state``/``outcome`` are the facts.
A view never carries a private field the caller may not see: content is withheld
(``None``) for conservative displays (D5), ``generation_unavailable`` (X6),
redacted sources (X7) and shredded conversations (X8)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

Display = Literal[
    "in_progress",
    "answer",
    "insufficient_evidence",
    "declined",
    "generation_unavailable",
    "delivery_unconfirmed",
    "stopped",
    "failed",
    "throttled",
    "rejected",
    "deleted",
]
"""* ``answer`` / ``insufficient_evidence`` / ``declined`` / ``generation_unavailable``: a completed
execution whose delivery finished, shown by its frozen outcome.
* ``delivery_unconfirmed``: completed, but delivery is pending or was interrupted (D5) — not shown as a
  complete answer and not rewritten as insufficient evidence; ``outcome`` keeps the frozen outcome.
* ``deleted``: the conversation was deleted or expired (X8); no private field remains."""

DeliveryState = Literal["pending", "sent", "interrupted", "completed", "received", "rendered"]
"""What Delivery observed for a run (``imprint.delivery.v1``). ``completed`` and later mean the terminal
frame was written and the response finished; anything else is conservative."""


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceItemView(_View):
    source_id: str
    title: str = ""
    excerpt: str | None = None
    redacted: bool = False


class TransitionView(_View):
    state: str
    previous: str | None
    sequence: int
    at: datetime


class ReceiptView(_View):
    """A tool receipt (P19): the runtime's own settlement of a tool call."""

    tool_call_id: str
    status: str
    at: datetime


class EffectView(_View):
    """A publication effect the journal observed (P19/P20): not a receipt, not a success claim."""

    kind: Literal["published", "unchanged"]
    candidate_id: str
    block_id: str
    revision: int
    receipt_id: str
    log_position: int
    body_sha256: str | None = None


class RefusalView(_View):
    message_type: str
    code: str
    detail: str = ""
    at: datetime


class ExecutionView(_View):
    run_id: str
    account_id: str
    conversation_id: str
    message_id: str
    state: Literal["admitted", "queued", "running", "completed", "stopped", "failed", "throttled", "rejected"]
    outcome: Literal["answered", "insufficient_evidence", "generation_unavailable", "declined"] | None = None
    """Only for ``completed``; always the frozen outcome, whatever the display."""
    display: Display
    complete: bool = False
    """True only for a completed execution whose delivery completed."""
    delivery_state: DeliveryState = "pending"
    question: str | None = None
    qcs_id: str | None = None
    inherits_from: str | None = None
    conditions: list[dict[str, str]] | None = None
    answer_text: str | None = None
    body_sha256: str | None = None
    evidence: list[EvidenceItemView] = []
    snapshot_id: str | None = None
    knowledge_version: str | None = None
    redacted_sources: list[str] = []
    shredded: bool = False
    """Some private field could not be opened because the conversation key is gone."""
    deleted: bool = False
    transitions: list[TransitionView] = []
    receipts: list[ReceiptView] = []
    effects: list[EffectView] = []
    refusals: list[RefusalView] = []
    diagnostics: list[str] = []
    """X9: bounded, codes and ids only."""


class HistoryItem(_View):
    message_id: str
    status: Literal["ok", "not_found", "integrity_error"]
    """``not_found``: the message → execution index has no entry (never a looser fallback).
    ``integrity_error``: the index or the public message disagrees with the immutable record."""
    error: str | None = None
    execution: ExecutionView | None = None


class ConversationHistory(_View):
    conversation_id: str
    account_id: str
    deleted: bool = False
    items: list[HistoryItem] = []

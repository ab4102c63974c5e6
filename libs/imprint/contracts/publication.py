"""``imprint.publication.v1``: what Publication decided (publication → delivery, journal).

``answer.preview`` is emitted before a commit and is never a claim of durability;
every other type except the save outcomes is relayed from the committed log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import Identifier, Model, RunMessage

SourceHint = Literal["sources_verified", "sources_partial", "sources_unverified", "unknown"]
CitationStatus = Literal["valid", "dropped"]
BlockHint = Literal["citation_dropped", "numeric_unavailable", "metadata_dropped", "truncated"]
RejectionReason = Literal["empty_body", "unauthorized_source", "malformed_block"]
RevisionRejectionReason = Literal["invalid_target", "quota_exceeded"]
WithdrawalCause = Literal["source_revoked", "source_tombstoned", "conversation_deleted"]


class Content(Model):
    type: Literal["text", "table"]
    markdown: str


class Citation(Model):
    source_id: str
    status: CitationStatus


class RenderedNumber(Model):
    handle_id: str
    rendered: str
    version: int | None = None


class Receipt(Model):
    """Proof of a durable commit: the log position the block revision was recorded at."""

    receipt_id: Identifier
    log_position: int
    committed_at: datetime


class BlockView(Model):
    """A block revision as Publication settled it."""

    block_id: Identifier
    revision: int = Field(ge=1)
    delivery_ordinal: int = Field(ge=1)
    candidate_id: Identifier
    content: Content
    role: str = "answer"
    citations: list[Citation] = []
    numbers: list[RenderedNumber] = []
    depends_on: list[str] = []
    source_hint: SourceHint
    effective_sources: list[str] | None = None
    """Every source this revision stands on, through citations and dependencies.
    ``[]`` is a verified-empty set; ``None`` means it is not known (P10)."""
    hints: list[BlockHint] = []
    truncated: bool = False
    body_sha256: str


class CommittedBlock(BlockView):
    receipt: Receipt


def _block_ids(block: BlockView) -> dict[str, Any]:
    """The ids of the block revision a message carries, for its spans."""
    return {"block_id": block.block_id, "candidate_id": block.candidate_id, "revision": block.revision}


class AnswerPreview(RunMessage):
    """Prepared but not saved (P14). Never shown as saved."""

    type: Literal["answer.preview"] = "answer.preview"
    block: BlockView

    def trace_ids(self) -> dict[str, Any]:
        return {**super().trace_ids(), **_block_ids(self.block)}


class AnswerPublished(RunMessage):
    """Relayed from a committed event of the Publication log."""

    type: Literal["answer.published"] = "answer.published"
    block: CommittedBlock

    def trace_ids(self) -> dict[str, Any]:
        return {**super().trace_ids(), **_block_ids(self.block)}


class AnswerUnchanged(RunMessage):
    """An exact duplicate (P11): the original receipt is reused."""

    type: Literal["answer.unchanged"] = "answer.unchanged"
    candidate_id: Identifier
    block_id: Identifier
    revision: int
    receipt: Receipt


class AnswerRejected(RunMessage):
    """A block was refused. ``reason`` is a client-safe code; details stay in the log."""

    type: Literal["answer.rejected"] = "answer.rejected"
    candidate_id: Identifier
    block_index: int = 0
    block_id: Identifier | None = None
    reason: RejectionReason


class AnswerRevisionRejected(RunMessage):
    type: Literal["answer.revision_rejected"] = "answer.revision_rejected"
    candidate_id: Identifier
    block_index: int = 0
    target_block_id: str
    reason: RevisionRejectionReason


class AnswerWithdrawn(RunMessage):
    """The block is removed from current display; its history stays auditable (P21)."""

    type: Literal["answer.withdrawn"] = "answer.withdrawn"
    block_id: Identifier
    revision: int
    cause: WithdrawalCause
    source_id: str | None = None


class AnswerSaveUnknown(RunMessage):
    """The database could not confirm the commit; resolved by reading back the candidate."""

    type: Literal["answer.save_unknown"] = "answer.save_unknown"
    candidate_id: Identifier
    block_ids: list[str] = []


class AnswerSaveFailed(RunMessage):
    type: Literal["answer.save_failed"] = "answer.save_failed"
    candidate_id: Identifier
    block_ids: list[str] = []
    error: str


SaveOutcome = AnswerSaveUnknown | AnswerSaveFailed
"""A candidate's save that did not confirm: still unknown (being read back) or failed. It
names the blocks it concerns (none: every block of the run)."""


class AnswerSettled(RunMessage):
    """Publication has settled every proposal the runtime made before the run's terminal
    event (same partition, so nothing earlier is still pending), and this follows all of
    the run's committed facts in the log. Delivery ends a stream only after this *and*
    the journal's closed record, so ``done`` never overtakes a committed block."""

    type: Literal["answer.settled"] = "answer.settled"
    state: Literal["completed", "stopped", "failed", "throttled", "rejected"]


PublicationMessage = Annotated[
    Union[
        AnswerPreview,
        AnswerPublished,
        AnswerUnchanged,
        AnswerRejected,
        AnswerRevisionRejected,
        AnswerWithdrawn,
        AnswerSaveUnknown,
        AnswerSaveFailed,
        AnswerSettled,
    ],
    Field(discriminator="type"),
]
publication_messages: TypeAdapter[PublicationMessage] = TypeAdapter(PublicationMessage)

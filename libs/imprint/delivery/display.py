"""The per-run answer view's state, and the one entry a viewer sees of each block
(P16 merge priority, P17 conflict, P18 position, P21 withdrawal): the rules themselves
are listed in :mod:`imprint.delivery.merge`, which folds each ``imprint.publication.v1``
message into this state. Values and pure reads only."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from imprint.contracts.publication import BlockView, CommittedBlock

BodyKind = Literal["preview", "published"]
DisplayStatus = Literal["saved", "unsaved", "save_unknown", "conflict"]

CLIENT_SAFE_REASONS: dict[str, str] = {
    "empty_body": "empty_body",
    "malformed_block": "malformed_block",
    # Telling a client that a cited source exists but is not authorized would reveal
    # a private source (D6); every source-related refusal reads the same.
    "unauthorized_source": "not_publishable",
    "invalid_target": "invalid_target",
    "quota_exceeded": "quota_exceeded",
}


def client_reason(reason: str) -> str:
    """The reason code a client may see (D6): known codes map to a fixed, source-free
    vocabulary; anything else reads as ``not_publishable``."""
    return CLIENT_SAFE_REASONS.get(reason, "not_publishable")


class Mutable(BaseModel):
    model_config = {"extra": "forbid"}


class Seen(Mutable):
    kind: BodyKind
    sha256: str
    candidate_id: str


class Conflict(Mutable):
    """P17: two bodies claimed one (block_id, revision). A fact, never resolved here."""

    run_id: str
    block_id: str
    revision: int
    first_kind: BodyKind
    first_sha256: str
    second_kind: BodyKind
    second_sha256: str
    first_candidate_id: str = ""
    second_candidate_id: str = ""


class BlockState(Mutable):
    block_id: str
    ordinal: int | None = None
    ordinal_fixed: bool = False
    """True once the first commit fixed the position (P18)."""
    committed: dict[int, CommittedBlock] = Field(default_factory=dict)
    preview: BlockView | None = None
    preview_status: Literal["unsaved", "save_unknown"] = "unsaved"
    seen: dict[int, Seen] = Field(default_factory=dict)
    conflicted: list[int] = Field(default_factory=list)
    hidden_through: int = 0
    """Every revision up to this one is hidden (withdrawn or source-rejected)."""
    hidden_cause: str | None = None
    settled_candidates: list[str] = Field(default_factory=list)
    """Candidates whose preview was rejected or failed: a late preview of theirs is ignored."""

    def known_revisions(self) -> int:
        revisions = [*self.committed, *self.seen, *self.conflicted]
        if self.preview is not None:
            revisions.append(self.preview.revision)
        return max(revisions, default=0)

    def top_committed(self) -> int | None:
        live = [r for r in self.committed if r > self.hidden_through and r not in self.conflicted]
        return max(live, default=None)


class AnswerState(Mutable):
    run_id: str
    blocks: dict[str, BlockState] = Field(default_factory=dict)
    conflicts: list[Conflict] = Field(default_factory=list)

    def block(self, block_id: str) -> BlockState:
        state = self.blocks.get(block_id)
        if state is None:
            state = self.blocks[block_id] = BlockState(block_id=block_id)
        return state


def _entry(block: BlockView, *, status: DisplayStatus, ordinal: int, receipt: Any = None) -> dict[str, Any]:
    return {
        "block_id": block.block_id,
        "revision": block.revision,
        "delivery_ordinal": ordinal,
        "candidate_id": block.candidate_id,
        "content": block.content.model_dump(mode="json"),
        "role": block.role,
        "citations": [c.model_dump(mode="json") for c in block.citations],
        "numbers": [n.model_dump(mode="json") for n in block.numbers],
        "depends_on": list(block.depends_on),
        "source_hint": block.source_hint,
        "hints": list(block.hints),
        "truncated": block.truncated,
        "body_sha256": block.body_sha256,
        "status": status,
        "saved": status == "saved",
        "receipt": receipt.model_dump(mode="json") if receipt is not None else None,
        "conflict": None,
    }


def display(state: BlockState) -> dict[str, Any] | None:
    """The one entry a viewer shows for this block now, or ``None`` (hidden/nothing)."""
    top = state.top_committed()
    preview = state.preview
    if preview is not None and (
        preview.revision <= state.hidden_through
        or preview.revision in state.conflicted
        or (top is not None and preview.revision <= top)
    ):
        preview = None
    floor = max(top or 0, preview.revision if preview is not None else 0, state.hidden_through)
    open_conflicts = [r for r in state.conflicted if r > floor]
    conflict = max(open_conflicts, default=None)
    ordinal = state.ordinal or 0

    if preview is not None:
        entry = _entry(preview, status=state.preview_status, ordinal=ordinal or preview.delivery_ordinal)
    elif top is not None:
        committed = state.committed[top]
        entry = _entry(committed, status="saved", ordinal=ordinal or committed.delivery_ordinal,
                       receipt=committed.receipt)
    elif conflict is not None:
        # Nothing trustworthy to show: hold the position, show no body (P17).
        return {
            "block_id": state.block_id, "revision": conflict, "delivery_ordinal": ordinal,
            "candidate_id": None, "content": None, "role": "answer", "citations": [], "numbers": [],
            "depends_on": [], "source_hint": "unknown", "hints": [], "truncated": False,
            "body_sha256": None, "status": "conflict", "saved": False, "receipt": None,
            "conflict": {"revision": conflict},
        }
    else:
        return None
    if conflict is not None:
        entry["conflict"] = {"revision": conflict}
    return entry


def kept(state: BlockState) -> dict[str, Any] | None:
    """X11: the block revision a stop keeps — the newest committed revision still shown
    (neither withdrawn nor in conflict), whatever preview is shown over it; ``None`` for a
    block with none (only previewed, or hidden)."""
    top = state.top_committed()
    if top is None:
        return None
    committed = state.committed[top]
    return {"block_id": state.block_id, "revision": top,
            "delivery_ordinal": state.ordinal or committed.delivery_ordinal,
            "body_sha256": committed.body_sha256, "receipt_id": committed.receipt.receipt_id}


def view(state: AnswerState) -> list[dict[str, Any]]:
    """Every displayed block in ordinal order (withdrawn and hidden omitted)."""
    entries = [e for e in (display(b) for b in state.blocks.values()) if e is not None]
    return sorted(entries, key=lambda e: (e["delivery_ordinal"], e["block_id"]))

"""What a run records about each settled candidate, and the ids that prove it, as values:
how each block of a candidate ended (:class:`CandidateOutcome`, read back by
:meth:`~imprint.publication.run.PublicationRun.settled` — P15, P19), the receipt id of a
committed revision, and the key of a recovery finding (R7). Pure: no aggregate, no I/O."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from imprint.contracts.publication import Receipt

RECEIPT_NAMESPACE = uuid.UUID("9d2c4b6a-8e1f-5a3b-9c7d-2e4f6a8b0c1d")

OutcomeKind = Literal["committed", "unchanged", "rejected", "revision_rejected"]
ReconciliationKind = Literal[
    "effect_confirmed", "save_resolved", "save_not_committed", "preview_not_committed", "committed_unjournaled",
]
"""R7: what ``imprint recover --apply`` may record. None of them settles a
candidate, changes a block or promotes a preview."""


def reconciliation_key(kind: str, candidate_id: str | None, block_id: str | None, revision: int | None) -> str:
    return f"{kind}|{candidate_id or ''}|{block_id or ''}|{'' if revision is None else revision}"


_RECEIPT_NAMESPACE_BYTES = RECEIPT_NAMESPACE.bytes


def receipt_id_for(block_id: str, revision: int) -> str:
    """``str(uuid.uuid5(RECEIPT_NAMESPACE, f"{block_id}:{revision}"))``, spelled out: the
    ``UUID`` object it builds and formats was a tenth of a replayed view's cost."""
    digest = bytearray(hashlib.sha1(_RECEIPT_NAMESPACE_BYTES + f"{block_id}:{revision}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class BlockOutcome:
    """How one block of a settled candidate ended."""

    block_index: int
    kind: OutcomeKind
    block_id: str | None = None
    revision: int | None = None
    reason: str | None = None
    receipt: Receipt | None = None


@dataclass(frozen=True, slots=True)
class CandidateOutcome:
    """The read-back of a candidate identity (P15, P19)."""

    candidate_id: str
    blocks: tuple[BlockOutcome, ...]

    @classmethod
    def from_state(cls, candidate_id: str, outcomes: list[dict[str, Any]]) -> CandidateOutcome:
        """The outcome the run noted for each block of ``candidate_id``, in its state's shape."""
        return cls(candidate_id, tuple(
            BlockOutcome(
                block_index=o["block_index"], kind=o["kind"], block_id=o["block_id"], revision=o["revision"],
                reason=o["reason"], receipt=None if o["receipt"] is None else Receipt.model_validate(o["receipt"]),
            )
            for o in outcomes
        ))

    @property
    def committed(self) -> tuple[BlockOutcome, ...]:
        return tuple(b for b in self.blocks if b.kind in ("committed", "unchanged"))

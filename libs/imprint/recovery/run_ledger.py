"""What the Publication log's fold keeps per run (R1): a run's ledger, its blocks' histories and
the records recovery could not read.

:class:`RunLedger` is the read model every recovery tool uses, rebuilt by
:class:`~imprint.recovery.ledger.LogFold` from the run's committed events only; a
:class:`BlockHistory` is one block id's committed revisions (:class:`Revision`, each exactly as
its commit event recorded it) and its withdrawal; a :class:`Defect` is a record withheld alone (R4).

No I/O."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from imprint.publication.proof import Proven
from imprint.publication.sources import SourceStanding, with_noted

SealStatus = Literal["opened", "shredded", "unopenable"]
Seen = tuple["SealStatus | None", "Proven | None"]
"""What the reader saw of an event: its sealed body (a commit's, X8) and its proof, if it found one intact."""
NOTHING_SEEN: Seen = (None, None)


@dataclass(slots=True)
class Revision:
    """One committed block revision, exactly as its commit event recorded it.

    Nothing changes a revision once the fold has made it; it is not a frozen dataclass
    because the fold makes one for every commit of the log, and a frozen dataclass sets
    each of its fields through ``object.__setattr__`` as it is made."""

    block: Mapping[str, Any]
    """The settled BlockView, JSON-shaped (a private copy)."""
    receipt: Mapping[str, Any]
    """``{receipt_id, log_position, committed_at}`` — the commit event is the receipt."""
    candidate_id: str | None
    block_index: int | None
    is_modification: bool | None
    target: str | None
    seal: SealStatus | None = None
    """How the reader found the sealed body (X8): ``opened``, ``shredded`` (its key was
    destroyed), ``unopenable`` (a seal that should open did not); ``None``: not sealed."""
    proven: Proven | None = None
    """The reader found the commit's proof intact (:mod:`imprint.publication.proof`): the
    record is what Publication committed, served in this form without a full examination."""

    @property
    def block_id(self) -> str:
        return str(self.block.get("block_id"))

    @property
    def revision(self) -> int | None:
        value = self.block.get("revision")
        return value if isinstance(value, int) else None

    @property
    def ordinal(self) -> int:
        value = self.block.get("delivery_ordinal")
        return value if isinstance(value, int) else 0

    @property
    def receipt_id(self) -> str | None:
        value = self.receipt.get("receipt_id")
        return value if isinstance(value, str) else None


@dataclass(slots=True)
class BlockHistory:
    """A block id's committed revisions in log order, and its withdrawal if any."""

    block_id: str
    revisions: list[Revision] = field(default_factory=list)
    withdrawn: dict[str, Any] | None = None

    @property
    def current(self) -> Revision:
        return self.revisions[-1]

    @property
    def live(self) -> bool:
        return self.withdrawn is None

    @property
    def ordinal(self) -> int:
        """P18: the position assigned at the first commit, kept by revisions."""
        return self.revisions[0].ordinal

    def by_receipt(self, receipt_id: str) -> Revision | None:
        return next((r for r in self.revisions if r.receipt_id == receipt_id), None)


@dataclass(frozen=True, slots=True)
class Defect:
    """A log record recovery could not read; it is withheld alone (R4)."""

    log_position: int | None
    reason: str
    detail: str = ""
    block_id: str | None = None


@dataclass(slots=True)
class RunLedger:
    """One run's facts, rebuilt from its committed events only."""

    run_id: str
    originator_id: uuid.UUID | None = None
    account_id: str | None = None
    conversation_id: str | None = None
    version: int = 0
    grants: dict[str, dict[str, Any]] = field(default_factory=dict)
    numerics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Every issued version per handle, oldest first. Views never read these (R6)."""
    blocks: dict[str, BlockHistory] = field(default_factory=dict)
    settlements: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """candidate id → ``{block_index, kind, block_id, revision, reason, log_position}`` in log order."""
    save_failures: list[dict[str, Any]] = field(default_factory=list)
    preview_quota: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    reconciled: dict[str, dict[str, Any]] = field(default_factory=dict)
    source_changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """P21: source id → the revocations the run noted of it (``SourceStandingChanged``), JSON-shaped
    as :func:`~imprint.publication.sources.note_revocation` keeps them."""
    conversation_deleted: str | None = None
    """X8: why the run's conversation was deleted, if it was: none of its bodies is exported."""
    ended: str | None = None
    """The terminal state the run ended in, once it reached Publication (``Ended``): every proposal
    made before it is settled in the log before it. Never a claim that the run succeeded (P20)."""
    lapsed: str | None = None
    """X10: why the Journal closed the run when its lease lapsed, if it did (``LeaseLapsed``)."""
    defects: list[Defect] = field(default_factory=list)
    trail: list[dict[str, Any]] = field(default_factory=list)
    """Every fact of the run in log order, for audit (P21, ``imprint export``)."""

    def settled_after(self, candidate_id: str, log_position: int) -> list[dict[str, Any]]:
        return [s for s in self.settlements.get(candidate_id, ()) if s["log_position"] > log_position]

    def in_delivery_order(self) -> list[BlockHistory]:
        return sorted(self.blocks.values(), key=lambda h: (h.ordinal, h.block_id))

    def lifecycle(self) -> dict[str, str | None]:
        """What the run's own log holds of its lifecycle, shown beside the journal's (R7): the
        end that reached Publication, a lease lapse (X10), its conversation's deletion (X8)."""
        return {"ended": self.ended, "lapsed": self.lapsed, "conversation_deleted": self.conversation_deleted}

    def noted_standing(self, standing: SourceStanding) -> SourceStanding:
        """The registry's ``standing``, with the revocations the run's own log noted added (never
        removed): what the run holds itself is confirmed even where the registry's copy is older."""
        for source_id, noted in self.source_changes.items():
            facts = standing.get(source_id)
            if facts is not None:
                standing = standing.with_facts(with_noted(facts, noted))
        return standing

"""R3–R6: the protected read of one committed block, by run, block and receipt.

The body is served only when everything it stands on is confirmed *now*:

1. the run, the block and the revision the receipt names exist in the log
   (``not_found``, ``receipt_mismatch``);
2. the revision proves itself (R4: ``malformed_record``, ``corrupt_body``,
   ``proof_missing``) — a defect withholds this block alone;
3. the reader is the run's account (``account_unconfirmed``, ``account_mismatch``);
4. the block is still on current display (``withdrawn``);
5. its sources: the effective source set is known (``authorization_unconfirmed``
   otherwise), no source it stands on is now unauthorized for the run's
   account — revoked, tombstoned, another account's (``source_unauthorized``),
   and every citation that was valid still is (``citation_unconfirmed``); a
   revocation the run's own log noted (``SourceStandingChanged``, P21) counts
   beside the registry's, so a registry copy older than the run never serves it;
6. its inherited dependencies, transitively: each exists, is live, proves
   itself and stands on known, still-authorized sources
   (``dependency_unconfirmed``, ``dependency_withdrawn``, ``dependency_unauthorized``).

What cannot be confirmed is withheld, with a reason and without its body.
What is served is the revision as committed (R6): its text, rendered numbers
and citations of commit time, never re-rendered under today's numeric values.
Missing journal detail is no input here, so it can never reject a committed
body (R5).

Source standing comes from the source registry (``SourceRecord`` aggregates),
passed in as a :class:`~imprint.publication.sources.SourceStanding`. No I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from imprint.publication.citations import resolve
from imprint.publication.dependencies import reachable
from imprint.publication.facts import Grant, RunFacts, StateView
from imprint.publication.sources import SourceStanding
from imprint.recovery.integrity import defect_of, served_block
from imprint.recovery.run_ledger import RunLedger

WithholdReason = Literal[
    "not_found", "receipt_mismatch",
    "malformed_record", "corrupt_body", "proof_missing", "seal_unopenable", "shredded",
    "account_unconfirmed", "account_mismatch",
    "withdrawn",
    "authorization_unconfirmed", "source_unauthorized", "citation_unconfirmed",
    "dependency_unconfirmed", "dependency_withdrawn", "dependency_unauthorized",
]


@dataclass(frozen=True, slots=True)
class ProtectedRead:
    run_id: str
    block_id: str
    receipt_id: str
    status: Literal["served", "withheld"]
    reason: WithholdReason | None = None
    detail: str = ""
    """Operator detail (may name a source); never a body."""
    block: dict[str, Any] | None = None
    """The revision as committed, only when served."""
    current: bool | None = None
    """Whether the receipt names the block's current revision (``False``: history, R6)."""

    @property
    def served(self) -> bool:
        return self.status == "served"

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "block_id": self.block_id, "receipt_id": self.receipt_id,
                "status": self.status, "reason": self.reason, "detail": self.detail,
                "current": self.current, "block": self.block}


def _facts(ledger: RunLedger) -> RunFacts:
    return RunFacts(run_id=ledger.run_id, account_id=ledger.account_id,
                    grants=StateView(ledger.grants, Grant.from_state))


def read_protected(
    ledger: RunLedger | None,
    block_id: str,
    receipt_id: str,
    *,
    account_id: str | None,
    standing: SourceStanding,
    run_id: str | None = None,
) -> ProtectedRead:
    run_id = ledger.run_id if ledger is not None else (run_id or "")

    def withhold(reason: WithholdReason, detail: str = "", current: bool | None = None) -> ProtectedRead:
        return ProtectedRead(run_id, block_id, receipt_id, "withheld", reason, detail, None, current)

    if ledger is None:
        return withhold("not_found", "no such run in the Publication log")
    history = ledger.blocks.get(block_id)
    if history is None:
        return withhold("not_found", "no such block in this run")
    revision = history.by_receipt(receipt_id)
    if revision is None:
        return withhold("receipt_mismatch", "the receipt names no committed revision of this block")
    current = revision is history.current
    if any(d.block_id == block_id for d in ledger.defects):
        return withhold("proof_missing", "a record of this block could not be read", current)
    defect = defect_of(revision)
    if defect is not None:
        return withhold(defect, "", current)
    if ledger.account_id is None:
        return withhold("account_unconfirmed", "the run's account is not recorded", current)
    if account_id != ledger.account_id:
        return withhold("account_mismatch", "", current)
    if not history.live:
        return withhold("withdrawn", f"withdrawn: {history.withdrawn.get('cause') if history.withdrawn else ''}",
                        current)

    facts = _facts(ledger)
    standing = ledger.noted_standing(standing)
    block = revision.block
    sources = block.get("effective_sources")
    if sources is None:
        return withhold("authorization_unconfirmed", "effective sources of this revision are unknown", current)
    for source_id in sources:
        resolution = resolve(source_id, facts, standing)
        if resolution.standing == "unauthorized":
            return withhold("source_unauthorized", f"{source_id}: {resolution.why}", current)
    for citation in block.get("citations") or ():
        if citation.get("status") == "valid":
            resolution = resolve(citation.get("source_id", ""), facts, standing)
            if resolution.standing != "valid":
                return withhold("citation_unconfirmed", f"{citation.get('source_id')}: {resolution.why}", current)

    def next_of(dependency_id: str) -> Iterable[str]:  # asked only of a dependency that passed every check
        return ledger.blocks[dependency_id].current.block.get("depends_on") or ()

    for dependency_id in reachable(block.get("depends_on") or (), next_of, seen={block_id}):
        dependency = ledger.blocks.get(dependency_id)
        if dependency is None:
            return withhold("dependency_unconfirmed", f"{dependency_id} is not in this run's log", current)
        if not dependency.live:
            return withhold("dependency_withdrawn", dependency_id, current)
        if any(d.block_id == dependency_id for d in ledger.defects) or defect_of(dependency.current) is not None:
            return withhold("dependency_unconfirmed", f"{dependency_id} does not prove itself", current)
        inherited = dependency.current.block.get("effective_sources")
        if inherited is None:
            return withhold("dependency_unconfirmed", f"sources of {dependency_id} are unknown", current)
        for source_id in inherited:
            resolution = resolve(source_id, facts, standing)
            if resolution.standing == "unauthorized":
                return withhold("dependency_unauthorized", f"{source_id} via {dependency_id}: {resolution.why}",
                                current)

    return ProtectedRead(run_id, block_id, receipt_id, "served", None, "", served_block(revision), current)


def sources_to_confirm(ledger: RunLedger, block_id: str) -> frozenset[str]:
    """Every source id a protected read of ``block_id`` may consult (load these from the registry)."""
    ids: set[str] = set(ledger.grants)

    def revisions(current_id: str) -> list[dict[str, Any]]:
        history = ledger.blocks.get(current_id)
        return [] if history is None else [revision.block for revision in history.revisions]

    def next_of(current_id: str) -> list[str]:
        return [d for block in revisions(current_id) for d in block.get("depends_on") or ()]

    for current_id in reachable([block_id], next_of):
        for block in revisions(current_id):
            ids.update(block.get("effective_sources") or ())
            ids.update(c.get("source_id", "") for c in block.get("citations") or ())
    ids.discard("")
    return frozenset(ids)

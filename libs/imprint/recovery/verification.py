"""R4 with R1, P10, P11, P18, X8: the integrity verdict of one run (``imprint replay --verify``).

Determinism (two replays agree, the views equal the aggregates) is checked by the
reader; this module checks that what the log holds still proves itself:

* every committed revision of every block — not only the current one — against
  its ``body_sha256``, its receipt (the id Publication issues for (block, revision))
  and its candidate binding (:func:`imprint.recovery.integrity.diagnose`);
* every seal the reader could open (X8): a seal that does not open although its key
  exists fails; a body whose conversation was deleted is counted as ``shredded`` —
  gone by design, not corruption — and only its receipt is checked;
* the binding (block, revision, hash) of every source hint (P10): a known hint bound
  to another revision or body fails (``hint_unbound``); a record without a hint
  (legacy) reads as ``unknown`` and is noted, never counted as clean or as broken;
* revision numbers run 1, 2, … and keep the first commit's ordinal (P18);
* every ``unchanged`` settlement names a committed revision by its receipt (P11);
* every record the reader could not read or place (undecodable, unreadable,
  malformed, a withdrawal of a block never committed).

Each failure names its run, block, revision and log position, and why; the blocks
that verify are counted, so an operator sees both. No I/O; never raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imprint.publication.hints import KNOWN_HINTS, HintBinding, read_hint
from imprint.publication.run import receipt_id_for
from imprint.recovery.integrity import body_sha256, diagnose
from imprint.recovery.run_ledger import BlockHistory, RunLedger


@dataclass(frozen=True, slots=True)
class Failure:
    run_id: str
    block_id: str | None
    revision: int | None
    log_position: int | None
    reason: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "block_id": self.block_id, "revision": self.revision,
                "log_position": self.log_position, "reason": self.reason, "detail": self.detail}


@dataclass(slots=True)
class RunVerdict:
    run_id: str
    blocks: int = 0
    revisions: int = 0
    seals_opened: int = 0
    shredded: int = 0
    hints_unknown: int = 0
    failures: list[Failure] = field(default_factory=list)
    failed_blocks: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def blocks_verified(self) -> int:
        return self.blocks - len(self.failed_blocks)

    def fail(self, block_id: str | None, revision: int | None, position: int | None, reason: str,
             detail: str = "") -> None:
        self.failures.append(Failure(self.run_id, block_id, revision, position, reason, detail))
        if block_id is not None:
            self.failed_blocks.add(block_id)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "ok": self.ok, "blocks": self.blocks, "blocks_verified": self.blocks_verified,
                "revisions": self.revisions, "seals_opened": self.seals_opened, "shredded": self.shredded,
                "hints_unknown": self.hints_unknown, "failures": [f.to_json() for f in self.failures]}


def verify_ledger(ledger: RunLedger) -> RunVerdict:
    verdict = RunVerdict(ledger.run_id)
    for defect in ledger.defects:
        verdict.fail(defect.block_id, None, defect.log_position, defect.reason, defect.detail)
    for history in ledger.in_delivery_order():
        verdict.blocks += 1
        _verify_block(verdict, history)
    _verify_unchanged(verdict, ledger)
    return verdict


def _verify_block(verdict: RunVerdict, history: BlockHistory) -> None:
    first_ordinal = history.ordinal
    for index, revision in enumerate(history.revisions):
        verdict.revisions += 1
        position = revision.receipt.get("log_position")
        number = revision.revision
        if revision.seal == "opened":
            verdict.seals_opened += 1
        if number != index + 1:
            verdict.fail(history.block_id, number, position, "revision_out_of_sequence",
                         f"revision {number} is the block's commit number {index + 1}")
        if revision.ordinal != first_ordinal:
            verdict.fail(history.block_id, number, position, "ordinal_moved",
                         f"delivery ordinal {revision.ordinal}, first commit had {first_ordinal}")
        if revision.block_id != history.block_id:
            verdict.fail(history.block_id, number, position, "block_identity_changed", revision.block_id)
        found = diagnose(revision)
        if found is not None and found[0] == "shredded":
            verdict.shredded += 1
            if isinstance(number, int) and revision.receipt_id != receipt_id_for(history.block_id, number):
                verdict.fail(history.block_id, number, position, "proof_missing",
                             f"receipt {revision.receipt_id} is not the receipt of revision {number}")
            continue
        if found is not None:
            verdict.fail(history.block_id, number, position, found[0], found[1])
            continue
        _verify_hint(verdict, history.block_id, index + 1, revision.block, position)


def _verify_hint(verdict: RunVerdict, block_id: str, number: int, block: Any, position: int | None) -> None:
    """P10: the hint must be bound to the (block, revision, body) the reader holds."""
    hint = block.get("source_hint")
    if hint not in KNOWN_HINTS:
        verdict.hints_unknown += 1  # legacy: reads as unknown, never as clean
        return
    content = block.get("content") or {}
    held = HintBinding(block_id, number, body_sha256(str(content.get("markdown", ""))))
    if read_hint(block, held) == "unknown":
        verdict.fail(block_id, number, position, "hint_unbound",
                     f"hint {hint} is bound to {HintBinding.of(block)} not to this revision")


def _verify_unchanged(verdict: RunVerdict, ledger: RunLedger) -> None:
    for candidate_id, settlements in ledger.settlements.items():
        for settlement in settlements:
            if settlement["kind"] != "unchanged":
                continue
            block_id, number = settlement["block_id"], settlement["revision"]
            receipt_id = (settlement.get("receipt") or {}).get("receipt_id")
            history = ledger.blocks.get(block_id) if isinstance(block_id, str) else None
            revision = history.by_receipt(receipt_id) if history is not None and receipt_id else None
            if revision is None or revision.revision != number:
                verdict.fail(block_id, number, settlement["log_position"], "unbound_receipt",
                             f"{candidate_id} reuses a receipt that names no committed revision {number}")

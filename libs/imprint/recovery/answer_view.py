"""R1: answer views rebuilt from the Publication log alone, with a stable hash.

The answer view of a run is its live blocks in delivery order, each at its
current committed revision, exactly as committed: content, revision, body
hash, source hint (read through its binding, P10), hints, truncation, bindings
and receipt. Withdrawn blocks are omitted (P21; ``imprint export`` keeps their
history). A revision whose record no longer proves itself (R4) is listed under
``withheld`` with its reason and no body; the other blocks are still served.

Nothing here re-renders anything: numbers are the values rendered at commit
time (R6), and a later ``numeric.issued`` does not change a view or its hash.
Nothing consults the runtime journal (R2, R5): a block committed here is in the
view whether or not the journal ever saw it.

:func:`view_hash` is sha256 over canonical JSON (sorted keys, no whitespace,
UTF-8), so replaying the same log yields the same hash."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

from imprint.canonical import canonical_bytes, canonical_sha256
from imprint.recovery.integrity import served
from imprint.recovery.ledger import LogFold
from imprint.recovery.run_ledger import RunLedger

VIEW_VERSION = 1


def view_hash(view: Mapping[str, Any]) -> str:
    """SHA-256 of the view's canonical JSON (:mod:`imprint.canonical`)."""
    return canonical_sha256(view)


def answer_view(ledger: RunLedger) -> dict[str, Any]:
    return _view(ledger)[0]


def hashed_answer_view(ledger: RunLedger) -> tuple[dict[str, Any], str]:
    """The view and :func:`view_hash` of it, where each proven block's canonical JSON is the
    one its proof was checked over (a replay writes the hash of every view it rebuilds).
    A view holds no float — its blocks are :class:`CommittedBlock` JSON, the rest ids,
    counts and reasons — so its JSON is not searched for one (:func:`canonical_bytes`)."""
    view, proven = _view(ledger)
    # the canonical JSON is hashed piece by piece as it is written: a run's blocks are never
    # copied into one text (sorted keys, no whitespace)
    digest = hashlib.sha256(b"{")
    for index, key in enumerate(sorted(view)):
        digest.update(b"," + canonical_bytes(key) + b":" if index else canonical_bytes(key) + b":")
        if key == "blocks":
            digest.update(b"[")
            for place, (text, block) in enumerate(zip(proven, view["blocks"])):
                if place:
                    digest.update(b",")
                digest.update(text if text is not None else canonical_bytes(block, floats=False))
            digest.update(b"]")
        else:
            digest.update(canonical_bytes(view[key], floats=False))
    digest.update(b"}")
    return view, digest.hexdigest()


def _view(ledger: RunLedger) -> tuple[dict[str, Any], list[bytes | None]]:
    """The view, and for each of its blocks the canonical JSON its proof covers (``None``:
    a block examined in full)."""
    blocks: list[dict[str, Any]] = []
    proven: list[bytes | None] = []
    withheld: list[dict[str, Any]] = []
    unreadable = {d.block_id: d for d in ledger.defects if d.block_id is not None}
    for history in ledger.in_delivery_order():
        if not history.live:
            continue
        current = history.current
        if history.block_id in unreadable:
            # a record of this block could not be read: its current revision is not confirmed
            withheld.append({"block_id": history.block_id, "revision": None, "delivery_ordinal": history.ordinal,
                             "reason": unreadable[history.block_id].reason})
            continue
        defect, block = served(current)
        if defect is not None:
            withheld.append({"block_id": history.block_id, "revision": current.revision,
                             "delivery_ordinal": history.ordinal, "reason": defect})
            continue
        assert block is not None
        blocks.append(block)
        proven.append(current.proven.canonical if current.proven is not None else None)
    for defect in ledger.defects:
        if defect.block_id is None:
            withheld.append({"block_id": None, "revision": None, "delivery_ordinal": None,
                             "reason": defect.reason, "log_position": defect.log_position})
    return {"view_version": VIEW_VERSION, "run_id": ledger.run_id, "blocks": blocks, "withheld": withheld}, proven


def answer_views(fold: LogFold, run_id: str | None = None) -> dict[str, dict[str, Any]]:
    """Views of every run the fold holds (or of one), by run id, in run id order."""
    run_ids = sorted(fold.runs) if run_id is None else [r for r in (run_id,) if r in fold.runs]
    return {r: answer_view(fold.runs[r]) for r in run_ids}


def replay(events: Iterable[Any], run_id: str | None = None) -> dict[str, tuple[dict[str, Any], str]]:
    """Fold ``events`` (log order) and return ``run_id → (view, hash)``."""
    views = answer_views(LogFold.of(events), run_id)
    return {r: (view, view_hash(view)) for r, view in views.items()}

"""P21: a run's full committed history, for audit (``imprint export``).

Every block with every committed revision as recorded (text, rendered numbers
and citations of commit time — R6), its withdrawal if any; and the run's
whole trail of facts in log order: grants, numeric issues, refusals,
rejections and revision rejections (with their internal detail — this is an
operator's audit, never a client answer), unchanged duplicates, save
failures, preview quota, withdrawals and reconciliations.

A withdrawn block stays in the export (P21). Each revision carries its
integrity verdict (R4) so an audit sees a tampered record as such. Bodies of
a conversation the user deleted are not exported (X8): their identity and
hashes stay, the text does not — every body of a run whose log holds the
deletion (``ConversationDeleted``), whatever withdrew its block first, and of
a block withdrawn for the deletion. The run's end, lease lapse and deletion
are stated as the log holds them. No I/O."""

from __future__ import annotations

from typing import Any

from imprint.recovery.integrity import defect_of
from imprint.recovery.run_ledger import RunLedger

EXPORT_VERSION = 1
REDACTED_CAUSES = frozenset({"conversation_deleted"})


def export_history(ledger: RunLedger) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for history in ledger.in_delivery_order():
        redacted = ledger.conversation_deleted is not None or (
            history.withdrawn is not None and history.withdrawn.get("cause") in REDACTED_CAUSES)
        revisions = []
        for revision in history.revisions:
            record = dict(revision.block)
            if redacted:
                record["content"] = None
            revisions.append({
                "revision": revision.revision,
                "candidate_id": revision.candidate_id,
                "block_index": revision.block_index,
                "is_modification": revision.is_modification,
                "replaces": revision.target,
                "receipt": dict(revision.receipt),
                "integrity": defect_of(revision) or "ok",
                "redacted": "conversation_deleted" if redacted else None,
                "block": record,
            })
        blocks.append({
            "block_id": history.block_id,
            "delivery_ordinal": history.ordinal,
            "status": "live" if history.live else "withdrawn",
            "withdrawn": history.withdrawn,
            "revisions": revisions,
        })
    return {
        "export_version": EXPORT_VERSION,
        "run_id": ledger.run_id,
        "account_id": ledger.account_id,
        "conversation_id": ledger.conversation_id,
        "log_version": ledger.version,
        "log_lifecycle": ledger.lifecycle(),
        "blocks": blocks,
        "trail": [dict(entry) for entry in ledger.trail],
        "defects": [{"log_position": d.log_position, "reason": d.reason, "detail": d.detail, "block_id": d.block_id}
                    for d in ledger.defects],
    }

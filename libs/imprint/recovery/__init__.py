"""Recovery and replay (SPEC §4, R1–R7), as a pure core over Publication log events.

==================  ==========================================================
``ledger``          the log folded per run (the only read model used here)
``answer_view``     R1 answer views and their stable hash (R2, R5, R6)
``integrity``       R4 does a committed revision still prove itself
``protected``       R3–R6 the protected read of one block
``report``          R7 the recovery report, reconciliation findings (P15, P19)
``export``          P21 a run's committed history for audit
==================  ==========================================================

No Kafka, SQL, HTTP or journal reads here; the adapters in
``services.recovery`` read the log and print."""

from imprint.recovery.answer_view import answer_view, answer_views, canonical_json, replay, view_hash
from imprint.recovery.export import export_history
from imprint.recovery.integrity import defect_of
from imprint.recovery.ledger import BlockHistory, Defect, LogFold, Revision, RunLedger
from imprint.recovery.protected import ProtectedRead, read_protected, sources_to_confirm
from imprint.recovery.report import Reconciliation, pending_reconciliations, recovery_report

__all__ = [
    "BlockHistory",
    "Defect",
    "LogFold",
    "ProtectedRead",
    "Reconciliation",
    "Revision",
    "RunLedger",
    "answer_view",
    "answer_views",
    "canonical_json",
    "defect_of",
    "export_history",
    "pending_reconciliations",
    "read_protected",
    "recovery_report",
    "replay",
    "sources_to_confirm",
    "view_hash",
]

"""Recovery and replay (SPEC §4, R1–R7), as a pure core over Publication log events.

==================  ==========================================================
``ledger``          the log folded per run, a row per stored event type (R1)
``run_ledger``      what the fold keeps per run: its blocks' histories, its defects (R1)
``answer_view``     R1 answer views and their stable hash (R2, R5, R6)
``integrity``       R4 does a committed revision still prove itself
``protected``       R3–R6 the protected read of one block
``report``          R7 the recovery report, reconciliation findings (P15, P19)
``verification``    R4 the integrity verdict of a run (``replay --verify``)
``journal_facts``   the journal's events folded, for comparison only (R2, R5, R7)
``timeline``        the run inspector: the five facts per block revision
``export``          P21 a run's committed history for audit
==================  ==========================================================

No Kafka, SQL, HTTP or journal reads here; the adapters in
``services.recovery`` read the log and print."""

from imprint.canonical import canonical_json
from imprint.recovery.answer_view import answer_view, answer_views, hashed_answer_view, replay, view_hash
from imprint.recovery.export import export_history
from imprint.recovery.integrity import defect_of
from imprint.recovery.ledger import LogFold
from imprint.recovery.run_ledger import BlockHistory, Defect, Revision, RunLedger
from imprint.recovery.protected import ProtectedRead, read_protected, sources_to_confirm
from imprint.recovery.journal_facts import JournalRun
from imprint.recovery.report import Reconciliation, pending_reconciliations, recovery_report
from imprint.recovery.timeline import Observation, SentFrame, timeline
from imprint.recovery.verification import Failure, RunVerdict, verify_ledger

__all__ = [
    "BlockHistory",
    "Defect",
    "Failure",
    "JournalRun",
    "Observation",
    "LogFold",
    "ProtectedRead",
    "Reconciliation",
    "Revision",
    "RunLedger",
    "RunVerdict",
    "SentFrame",
    "answer_view",
    "answer_views",
    "hashed_answer_view",
    "canonical_json",
    "defect_of",
    "export_history",
    "pending_reconciliations",
    "read_protected",
    "recovery_report",
    "replay",
    "sources_to_confirm",
    "timeline",
    "verify_ledger",
    "view_hash",
]

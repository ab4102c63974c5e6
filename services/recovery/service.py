"""The operator readers as other parts see them (Delivery's operator page): one run's
committed ledger from the Publication log, the journal's view read-only, what Delivery
observed, and the timeline assembled from the three."""

from services.recovery.cli import assemble_timeline, observe_run
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import read_ledger

__all__ = ["JournalReader", "assemble_timeline", "observe_run", "read_ledger"]

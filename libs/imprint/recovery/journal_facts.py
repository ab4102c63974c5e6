"""What the runtime journal recorded about one run, as recovery compares it (R2, R5, R7, P19).

The journal is consulted read-only and only to *compare*: which committed block
revisions it observed (``answer.published``/``answer.unchanged``), which tool
receipts it holds, and the run's lifecycle. It is never a source of answer views:
nothing here feeds :mod:`imprint.recovery.answer_view`, and a block the journal never
saw stays in the view (R2, R5).

:class:`JournalRun` is plain data an adapter fills from the journal's store
(``services.recovery.journal_reader``). No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

JournalAvailability = Literal["consulted", "absent", "unavailable"]
"""``consulted``: the journal's store was read; ``absent``: this deployment has no journal
store (no journal ever ran); ``unavailable``: it could not be read (the reason says why)."""


@dataclass(frozen=True, slots=True)
class JournalRun:
    run_id: str
    found: bool
    """Whether the journal holds an execution for this run at all."""
    state: str | None = None
    outcome: str | None = None
    erased: bool = False
    transitions: tuple[dict[str, Any], ...] = ()
    """``{state, at, reason}`` in order."""
    effects: tuple[dict[str, Any], ...] = ()
    """``{kind, candidate_id, block_id, revision, body_sha256, receipt_id, log_position, at}``."""
    receipts: tuple[dict[str, Any], ...] = ()
    """``{tool_call_id, status, at}`` in order."""
    refusals: tuple[dict[str, Any], ...] = ()
    """``{message_type, code, detail, at}`` in order: what the journal refused about the run (X2),
    e.g. what its runtime sent after the run was closed (X10)."""
    lapsed: str | None = None
    """X10: why the journal closed the run when its lease lapsed (``runtime_lost``), if it did."""
    stop_requested: str | None = None
    """X11: when the run's user asked it to stop while it was open (RFC 3339), if they did."""

    def journaled(self) -> frozenset[tuple[str, int]]:
        """The (block_id, revision) pairs whose commit the journal observed."""
        return frozenset((e["block_id"], e["revision"]) for e in self.effects)

    def tool_receipts(self) -> dict[str, str]:
        """tool_call_id → the latest receipt status the journal recorded."""
        latest: dict[str, str] = {}
        for receipt in self.receipts:
            latest[receipt["tool_call_id"]] = receipt["status"]
        return latest

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "found": self.found, "state": self.state, "outcome": self.outcome,
                "erased": self.erased, "transitions": list(self.transitions), "effects": list(self.effects),
                "receipts": list(self.receipts), "refusals": list(self.refusals), "lapsed": self.lapsed,
                "stop_requested": self.stop_requested}

"""The Publication log folded per run: the one read model every recovery tool uses (R1).

:class:`LogFold` takes the log's domain events in notification order (or one
run's stream in version order — a run's view depends on its own events only)
and keeps, per run, everything recovery may need: every committed revision of
every block with its receipt, withdrawals, each candidate's settlements, save
failures, preview quota, refusals, reconciliations, the revocations the run noted,
its conversation's deletion, its end and an audit trail.

What each stored event type means here is one row of a table: :data:`LEDGER` for the
run's own events (every one of them), :data:`OUTSIDE_RUNS` for the other aggregates the
Publication log holds, each with why a run's ledger takes nothing from it. An event
neither names becomes a defect, never a silent skip.

What the fold keeps per run, :class:`~imprint.recovery.run_ledger.RunLedger` and the block
histories in it, is its own module (:mod:`imprint.recovery.run_ledger`): a new stored event type
is a field or two there, and one method and one row here — the test that walks every stored
class points at this file's tables.

Nothing here reads the runtime journal, the repository's snapshots or a cache:
the log is the only input. The fold never mutates the events it reads and
never raises for a single bad record — an event it cannot read becomes a
:class:`Defect` of its run, so one corrupt record is withheld alone (R4).

No I/O."""

from __future__ import annotations

import copy
import uuid
from typing import Any, Callable, Iterable, Mapping

from imprint.publication.conversations import ConversationRuns
from imprint.publication.proof import Proven, iso_time, json_time
from imprint.publication.run import PublicationRun, reconciliation_key
from imprint.publication.sources import SourceDependents, SourceRecord, no_revocation, note_revocation
from imprint.recovery.run_ledger import (
    NOTHING_SEEN,
    BlockHistory,
    Defect,
    Revision,
    RunLedger,
    SealStatus,
    Seen,
)


def _at(event: Any) -> str | None:
    """The event's time as ``isoformat`` writes it (spelled as a proof spells it, and back)."""
    timestamp = getattr(event, "timestamp", None)
    return iso_time(json_time(timestamp)) if timestamp is not None else None


def _json_copy(value: Any) -> Any:
    return copy.deepcopy(value)


def _owned(value: Any) -> Any:
    return value


class LogFold:
    """Folds Publication log events into :class:`RunLedger` values, one per run.

    Each event type of a run has its row in :data:`LEDGER`; the log's other aggregates (the
    source registry, its shards' reliance records, the conversations) have theirs in
    :data:`OUTSIDE_RUNS`, saying why a run's ledger takes nothing from them: a run's answer
    view is a function of its own stream.

    ``owns_events``: the caller hands over events nothing else holds (a reader that
    has just decoded them and drops them after), so the fold keeps their values as
    its private copies instead of copying them. Otherwise every value the fold keeps
    is copied, and later changes to the events never reach a ledger.

    ``audit``: keep each run's audit trail and each candidate's settlements (what
    ``export``, ``inspect``, ``recover`` and ``--verify`` read). A fold for answer views
    only (``imprint replay``) leaves them out: a view reads neither, and they were about
    an eighth of the fold's cost per event. Everything a view reads is folded either way."""

    def __init__(self, *, owns_events: bool = False, audit: bool = True) -> None:
        self._copy = _owned if owns_events else _json_copy
        self._audit = audit
        self.runs: dict[str, RunLedger] = {}
        self._by_originator: dict[uuid.UUID, RunLedger] = {}
        self._last: tuple[object, RunLedger | None] = (None, None)  # the last event's stream and its ledger
        self.orphans: list[Defect] = []
        """Defects that could not be tied to any run."""

    @classmethod
    def of(cls, events: Iterable[Any]) -> LogFold:
        fold = cls()
        for event in events:
            fold.apply(event)
        return fold

    def ledger(self, run_id: str) -> RunLedger | None:
        return self.runs.get(run_id)

    # ------------------------------------------------------------------ input

    def apply(self, event: Any, seal: SealStatus | None = None, proven: Proven | None = None) -> None:
        """Fold one event; ``seal`` is what the reader saw of its sealed body, if any, and
        ``proven`` the commit's served form if the reader found its proof intact.

        An event of a run goes through its row of :data:`LEDGER`; one of the log's other
        aggregates is left, as its row of :data:`OUTSIDE_RUNS` says why. An event neither
        table names is not skipped: it is a defect of its run (or an orphan), so ``--verify``
        fails on it rather than a view being built without it."""
        handler = LEDGER.get(type(event))
        if handler is None:
            if type(event) not in OUTSIDE_RUNS:
                self._unknown(event)
            return
        ledger = self._ledger_for(event)
        if ledger is None:
            self.orphans.append(Defect(getattr(event, "originator_version", None), "unknown_run",
                                       f"{type(event).__name__} of a run whose opening was not read"))
            return
        position = getattr(event, "originator_version", None)
        if isinstance(position, int) and position > ledger.version:
            ledger.version = position
        try:
            # a proven commit's time was spelled for its proof already
            at = _at(event) if proven is None else iso_time(proven.form["receipt"]["committed_at"])
            entry: dict[str, Any] = {"log_position": position, "at": at, "type": type(event).__name__}
            handler(self, ledger, event, entry, NOTHING_SEEN if seal is None and proven is None else (seal, proven))
            if self._audit:
                ledger.trail.append(entry)
        except Exception as error:  # noqa: BLE001 — one unreadable record never sinks the run
            block_id = _block_id_of(event)
            ledger.defects.append(Defect(position, "unreadable_event", f"{type(event).__name__}: {type(error).__name__}",
                                         block_id))
            if self._audit:
                ledger.trail.append({"log_position": position, "at": _at(event), "type": type(event).__name__,
                                     "block_id": block_id, "defect": "unreadable_event"})

    def _unknown(self, event: Any) -> None:
        position = getattr(event, "originator_version", None)
        defect = Defect(position if isinstance(position, int) else None, "unknown_event_type",
                        f"{type(event).__qualname__}: recovery has no row for this stored event type")
        ledger = self._by_originator.get(getattr(event, "originator_id", None))  # type: ignore[arg-type]
        if ledger is None:
            self.orphans.append(defect)
            return
        ledger.defects.append(defect)
        if defect.log_position is not None:  # read up to it: a second read stops at the same place
            ledger.version = max(ledger.version, defect.log_position)

    def note_undecodable(self, originator_id: uuid.UUID, log_position: int | None, detail: str) -> None:
        """A stored event that could not even be decoded (the reader's report)."""
        ledger = self._by_originator.get(originator_id)
        defect = Defect(log_position, "undecodable_event", detail)
        if ledger is None:
            self.orphans.append(defect)
        else:
            ledger.defects.append(defect)
            if log_position is not None:
                ledger.version = max(ledger.version, log_position)

    def _ledger_for(self, event: Any) -> RunLedger | None:
        originator_id = getattr(event, "originator_id", None)
        if self._last[0] is originator_id and originator_id is not None:  # the last event's stream: no hashing
            return self._last[1]
        ledger = self._by_originator.get(originator_id) if originator_id is not None else None
        if ledger is not None:
            self._last = (originator_id, ledger)
            return ledger
        run_id = getattr(event, "run_id", None)
        if not isinstance(run_id, str):
            return None
        ledger = self.runs.get(run_id)
        if ledger is None:
            ledger = self.runs[run_id] = RunLedger(run_id=run_id, originator_id=originator_id)
        if originator_id is not None:
            self._by_originator[originator_id] = ledger
            self._last = (originator_id, ledger)
        return ledger

    # ------------------------------------------------------------- per event

    # One method per event type of a run (:data:`LEDGER`). ``entry`` is the event's line of the
    # audit trail (its log position and time are in it already); ``seen`` is what the reader saw
    # of a commit's sealed body and proof.

    def opened(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        """The run's stream begins; the run id it carries is what tied the ledger to it."""

    def admitted(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        ledger.account_id = event.account_id
        ledger.conversation_id = event.conversation_id
        entry.update(account_id=event.account_id, conversation_id=event.conversation_id)

    def evidence_granted(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        ledger.grants[event.source_id] = {
            "source_id": event.source_id, "scope": event.scope,
            "owner_account_id": event.owner_account_id, "title": event.title,
        }
        entry.update(source_id=event.source_id, scope=event.scope, owner_account_id=event.owner_account_id)

    def numeric_issued(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        issued = {"handle_id": event.handle_id, "value": event.value, "unit": event.unit,
                  "version": event.version, "source_id": event.source_id}
        ledger.numerics.setdefault(event.handle_id, []).append(issued)
        entry.update(issued)

    def candidate_refused(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        ledger.refusals.append({"log_position": entry["log_position"], "at": entry["at"], "reason": event.reason,
                                "detail": event.detail, "message_type": event.message_type,
                                "candidate_id": event.candidate_id})
        entry.update(reason=event.reason, detail=event.detail, message_type=event.message_type,
                     candidate_id=event.candidate_id)

    def preview_quota_consumed(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        ledger.preview_quota.append({"log_position": entry["log_position"], "at": entry["at"],
                                     "candidate_id": event.candidate_id, "block_index": event.block_index,
                                     "block_id": event.block_id, "quota_key": event.quota_key})
        entry.update(candidate_id=event.candidate_id, block_index=event.block_index, block_id=event.block_id)

    def candidate_unchanged(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        receipt = self._copy(event.receipt)
        self._settle(ledger, event.candidate_id, event.block_index, "unchanged", event.block_id,
                     event.revision, None, entry["log_position"], receipt)
        entry.update(candidate_id=event.candidate_id, block_index=event.block_index, block_id=event.block_id,
                     revision=event.revision, receipt=receipt)

    def block_rejected(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        self._settle(ledger, event.candidate_id, event.block_index, "rejected", event.block_id, None,
                     event.reason, entry["log_position"])
        entry.update(candidate_id=event.candidate_id, block_index=event.block_index, block_id=event.block_id,
                     reason=event.reason, detail=event.detail)

    def revision_rejected(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        self._settle(ledger, event.candidate_id, event.block_index, "revision_rejected", event.target_block_id,
                     None, event.reason, entry["log_position"])
        entry.update(candidate_id=event.candidate_id, block_index=event.block_index,
                     target_block_id=event.target_block_id, reason=event.reason, detail=event.detail)

    def block_withdrawn(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        position = entry["log_position"]
        history = ledger.blocks.get(event.block_id)
        if history is None:
            ledger.defects.append(Defect(position, "unknown_block", "withdrawal of a block never committed",
                                         event.block_id))
        elif history.withdrawn is None:
            history.withdrawn = {"cause": event.cause, "source_id": event.source_id, "revision": event.revision,
                                 "log_position": position, "at": entry["at"]}
        entry.update(block_id=event.block_id, revision=event.revision, cause=event.cause, source_id=event.source_id)

    def source_standing_changed(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        """P21 with R3: the run noted that a source it relied on was revoked or tombstoned. The
        protected read adds it to the registry's standing (:func:`RunLedger.noted_standing`), so
        a revocation the run's own log holds withholds its blocks even where the registry's
        copy of the source is older or missing. The withdrawals it caused are their own events."""
        note_revocation(ledger.source_changes.setdefault(event.source_id, no_revocation()),
                        tombstoned=event.cause == "source_tombstoned", account_id=event.account_id)
        entry.update(source_id=event.source_id, cause=event.cause, account_id=event.account_id)

    def conversation_deleted(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        """X8: the run's conversation was deleted. Its blocks' withdrawals are their own events
        (the answer view drops them); what the deletion itself means for recovery is that no body
        of the run is exported any more, whichever cause withdrew its block (``export``)."""
        ledger.conversation_deleted = event.reason
        entry.update(reason=event.reason)

    def save_failed(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        ledger.save_failures.append({"log_position": entry["log_position"], "at": entry["at"],
                                     "candidate_id": event.candidate_id, "block_ids": list(event.block_ids),
                                     "error": event.error})
        entry.update(candidate_id=event.candidate_id, block_ids=list(event.block_ids), error=event.error)

    def ended(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        """The runtime's terminal state reached Publication (or the Journal's lease lapse ended the
        run): every proposal made before it is settled in the log before it. The report and the
        inspector show it beside the journal's lifecycle (R7); it never claims the run succeeded
        (P20) and changes no view: the state is carried as it was sent."""
        ledger.ended = event.state
        entry.update(state=event.state)

    def lease_lapsed(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        """X10: the Journal closed the run; proposals after it were refused, not settled."""
        ledger.lapsed = event.reason
        entry.update(reason=event.reason)

    def reconciled(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        fact = {"kind": event.kind, "candidate_id": event.candidate_id, "block_id": event.block_id,
                "revision": event.revision, "detail": event.detail, "log_position": entry["log_position"],
                "at": entry["at"]}
        ledger.reconciled[reconciliation_key(event.kind, event.candidate_id, event.block_id, event.revision)] = fact
        entry.update(kind=event.kind, candidate_id=event.candidate_id, block_id=event.block_id,
                     revision=event.revision, detail=event.detail)

    def committed(self, ledger: RunLedger, event: Any, entry: dict[str, Any], seen: Seen) -> None:
        position = entry["log_position"]
        seal, proven = seen
        block = getattr(event, "block", None)
        if self._copy is not _owned:
            block = self._copy(block)
        block_id = block.get("block_id") if isinstance(block, dict) else None
        if not isinstance(block_id, str):
            ledger.defects.append(Defect(position, "malformed_record", "commit without a block identity"))
            entry.update(candidate_id=getattr(event, "candidate_id", None), defect="malformed_record")
            return  # nothing to place: the audit trail still shows the record
        receipt = {
            "receipt_id": getattr(event, "receipt_id", None),
            "log_position": position,
            "committed_at": entry["at"],  # the event's time, as apply read it
        }
        revision = Revision(
            block=block,
            receipt=receipt,
            candidate_id=getattr(event, "candidate_id", None),
            block_index=getattr(event, "block_index", None),
            is_modification=getattr(event, "is_modification", None),
            target=getattr(event, "target", None),
            seal=seal,
            proven=proven,
        )
        history = ledger.blocks.get(block_id)
        if history is None:
            ledger.blocks[block_id] = BlockHistory(block_id, [revision])
        else:
            history.revisions.append(revision)
        if not self._audit:  # neither the settlement nor the trail entry is kept
            return
        number = revision.revision
        if revision.candidate_id is not None:
            self._settle(ledger, revision.candidate_id, revision.block_index, "committed", block_id,
                         number, None, position, receipt)
        entry.update(candidate_id=revision.candidate_id, block_index=revision.block_index,
                     block_id=block_id, revision=number, receipt=receipt)

    def _settle(
        self, ledger: RunLedger, candidate_id: str, block_index: int | None, kind: str, block_id: str | None,
        revision: int | None, reason: str | None, position: int | None, receipt: Mapping[str, Any] | None = None,
    ) -> None:
        if not self._audit:
            return
        ledger.settlements.setdefault(candidate_id, []).append({
            "block_index": block_index, "kind": kind, "block_id": block_id, "revision": revision,
            "reason": reason, "log_position": position if position is not None else -1,
            "receipt": None if receipt is None else dict(receipt),
        })


def _block_id_of(event: Any) -> str | None:
    block = getattr(event, "block", None)
    if isinstance(block, Mapping) and isinstance(block.get("block_id"), str):
        return block["block_id"]
    block_id = getattr(event, "block_id", None)
    return block_id if isinstance(block_id, str) else None


Handler = Callable[[LogFold, RunLedger, Any, dict[str, Any], Seen], None]
"""A :class:`LogFold` method for one event type of a run: it folds the event into the run's
ledger and adds what the audit trail shows of it to ``entry``."""

LEDGER: dict[type, Handler] = {
    PublicationRun.BlockRevisionCommitted: LogFold.committed,
    PublicationRun.Opened: LogFold.opened,
    PublicationRun.Admitted: LogFold.admitted,
    PublicationRun.EvidenceGranted: LogFold.evidence_granted,
    PublicationRun.NumericIssued: LogFold.numeric_issued,
    PublicationRun.CandidateRefused: LogFold.candidate_refused,
    PublicationRun.PreviewQuotaConsumed: LogFold.preview_quota_consumed,
    PublicationRun.CandidateUnchanged: LogFold.candidate_unchanged,
    PublicationRun.BlockRejected: LogFold.block_rejected,
    PublicationRun.RevisionRejected: LogFold.revision_rejected,
    PublicationRun.BlockWithdrawn: LogFold.block_withdrawn,
    PublicationRun.SourceStandingChanged: LogFold.source_standing_changed,
    PublicationRun.ConversationDeleted: LogFold.conversation_deleted,
    PublicationRun.SaveFailed: LogFold.save_failed,
    PublicationRun.Ended: LogFold.ended,
    PublicationRun.LeaseLapsed: LogFold.lease_lapsed,
    PublicationRun.Reconciled: LogFold.reconciled,
}
"""Every event type of ``PublicationRun``: what recovery reads of it (R1). A test checks that
every event class the run aggregate can store has its row."""

OUTSIDE_RUNS: dict[type, str] = {
    # The source registry: the protected read asks it for a source's *current* standing
    # (R3, through the repository); a run's history never changes with it (R6). What a run
    # noted of a revocation is its own ``SourceStandingChanged``.
    SourceRecord.Created: "a source's registry record begins: no run's fact",
    SourceRecord.Registered: "registry standing, read current by the protected read (R3), never folded (R6)",
    SourceRecord.Revoked: "registry standing; the run's own SourceStandingChanged and BlockWithdrawn carry it",
    SourceRecord.Tombstoned: "registry standing; the run's own SourceStandingChanged and BlockWithdrawn carry it",
    SourceRecord.RelianceRecorded: "which runs rely on the source (older logs): Publication's fan-out for P21",
    SourceRecord.ShardOpened: "where the source's reliance records live: Publication's fan-out for P21",
    # A shard's record of the runs relying on a source: how Publication finds the runs a
    # revocation reaches, and the standing it noted for a stale copy of the source.
    SourceDependents.Created: "a shard's reliance record begins: no run's fact",
    SourceDependents.RelianceRecorded: "which runs rely on the source: Publication's fan-out for P21",
    SourceDependents.StandingNoted: "the shard's copy of a revocation; each run notes its own (SourceStandingChanged)",
    # The runs of a conversation: how a deletion reaches each run (X8), as its own ConversationDeleted.
    ConversationRuns.Created: "a conversation's run list begins: no run's fact",
    ConversationRuns.RunAdded: "which runs a deletion must reach; the run's own Admitted binds it",
    ConversationRuns.Deleted: "the deletion reaches each run as its own ConversationDeleted (X8)",
}
"""The Publication log's other aggregates' event types, each with why a run's ledger takes
nothing from it (R1: a run's view is a function of its own stream)."""

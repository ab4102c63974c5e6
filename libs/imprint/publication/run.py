"""The run aggregate: everything one Publication commit decides, for one run.

:class:`PublicationRun` is an ``eventsourcing`` aggregate with id
``uuid5(RUN_NAMESPACE, run_id)``. Saving its pending events is one
transaction (P15): the block revision with its body and bindings, the run
constraints it moved (quota counters, next ordinal), and — because every
outbound ``answer.*`` message is derived from these events by
:mod:`~imprint.publication.announcements` — the publication event too.

The aggregate is pure domain: no I/O. Its state is plain dicts, lists, strings
and numbers, so eventsourcing's JSON transcoder stores events and snapshots
as they are. A receipt is the commit event itself: ``log_position`` is the
event's ``originator_version`` in the run's stream, ``committed_at`` its
timestamp, ``receipt_id`` a uuid5 of (block_id, revision).

A candidate's settlement is recorded under its identity, so an
``answer.save_unknown`` is resolved by reading the run back and asking
:meth:`PublicationRun.settled` — never by assuming (P15, P19). The values it answers with,
and the receipt and reconciliation ids, are :mod:`~imprint.publication.outcomes`.

One file, though long: the aggregate, its nested events and the commands that trigger
them are the one consistency boundary of P15 — eventsourcing stores each event under its
aggregate's qualified name (``imprint.publication.run:PublicationRun.<Event>``, the topic in
every stored log), so the events cannot move, and each command is the one place its events
are triggered from; every rule it applies lives in its own module (``settlement`` and the
modules it runs)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any, Iterable

from eventsourcing.domain import Aggregate

from imprint.ids import FoundByKey, remembered

from imprint.contracts.publication import WithdrawalCause
from imprint.publication import settlement as decisions
from imprint.publication.candidate import Candidate, IntakeRefusal
from imprint.publication.conversations import ConversationRuns
from imprint.publication.dependencies import blocks_to_withdraw
from imprint.publication.facts import BlockRecord, Grant, NumericValue, RunFacts, StateView
from imprint.publication.outcomes import (  # the outcomes' names stay importable from here too
    RECEIPT_NAMESPACE, BlockOutcome, CandidateOutcome, OutcomeKind, ReconciliationKind, receipt_id_for,
    reconciliation_key,
)
from imprint.publication.policy import DEFAULT_POLICY, Policy
from imprint.publication.quota import quota_key
from imprint.publication.sources import (
    EMPTY_STANDING,
    SourceFacts,
    SourceStanding,
    no_revocation,
    note_revocation,
    with_noted,
)

RUN_NAMESPACE = uuid.UUID("0c8e5a4d-2f1b-5c3a-8d7e-6b5a4c3d2e1f")
MAX_ERROR_CHARS = 500

__all__ = [
    "MAX_ERROR_CHARS", "RECEIPT_NAMESPACE", "RUN_NAMESPACE", "BlockOutcome", "BlockSettled", "CandidateOutcome",
    "OutcomeKind", "PublicationRun", "ReconciliationKind", "receipt_id_for", "reconciliation_key",
]


class BlockSettled(Aggregate.Event):
    """How one block of a candidate was settled (committed, unchanged, rejected, or its
    revision rejected): what every such event names. A base, never stored itself."""

    run_id: str
    candidate_id: str
    block_index: int


@remembered
def run_aggregate_id(run_id: str) -> uuid.UUID:
    """``PublicationRun`` id: uuid5 of the run id."""
    return uuid.uuid5(RUN_NAMESPACE, run_id)


class PublicationRun(FoundByKey, Aggregate, key=run_aggregate_id, by=("run_id",)):
    """One run's publication state; commands below, events nested.

    ``class_version`` versions the run's snapshot state; each event class versions its
    own fields (R8).

    A block's state is what later decisions read — identity, position, fingerprint, body
    digest, bindings, receipt — never its body or view: those stay in its commit event.
    Every proposal of a run in flight stays in memory (the hot aggregates), and a block's
    view is a dozen containers that the cyclic collector walked at every full collection,
    in a pause that grew with the runs in flight; for the same reason a block's
    ``depends_on`` and ``labels`` are kept only when it has some."""

    class_version = 4

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 kept each block's committed view in its state, and its bindings
        when empty; its earliest snapshots predate the run's end."""
        state.setdefault("ended", None)
        for block in state.get("blocks", {}).values():
            block.pop("view", None)
            for name in ("depends_on", "labels"):
                if not block.get(name, True):
                    del block[name]

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        """Version 2 set a run's deletion (X8) and lease lapse (X10) only once they
        happened, so its snapshots of a run without them lack both."""
        state.setdefault("conversation_deleted", False)
        state.setdefault("lapsed", None)

    @staticmethod
    def upcast_v3_v4(state: dict[str, Any]) -> None:
        """Version 3 did not name the aggregates read with the run (:attr:`read_with`): an
        admitted run's conversation."""
        conversation_id = state.get("conversation_id")
        state["read_with"] = [ConversationRuns.id_for(conversation_id)] if conversation_id else []

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.account_id: str | None = None
        self.conversation_id: str | None = None
        self.grants: dict[str, dict[str, Any]] = {}
        self.numerics: dict[str, dict[str, Any]] = {}
        self.blocks: dict[str, dict[str, Any]] = {}
        self.fingerprints: dict[str, str] = {}
        self.consumed: dict[str, str] = {}
        self.block_modifications: dict[str, int] = {}
        self.run_modifications = 0
        self.next_ordinal = 1
        self.candidates: dict[str, list[dict[str, Any]]] = {}
        self.save_failures: dict[str, str] = {}
        self.ended: str | None = None
        self.conversation_deleted = False
        self.lapsed: str | None = None
        self.refusals = 0
        self.read_with: list[uuid.UUID] = []
        """The aggregates a unit that reads this run reads too, kept as ids: once admitted, its
        conversation's run index (X1, X8: a candidate is refused once it is deleted). A store
        loads them with the run (``imprint.workspace``), so no handler waits on a read."""

    # ------------------------------------------------------------------ events

    class Opened(Aggregate.Created):
        class_version = 1
        run_id: str

    class Admitted(Aggregate.Event):
        class_version = 1
        account_id: str
        conversation_id: str

        def apply(self, run: PublicationRun) -> None:
            run.account_id = self.account_id
            run.conversation_id = self.conversation_id
            run.read_with = [ConversationRuns.id_for(self.conversation_id)]

    class EvidenceGranted(Aggregate.Event):
        """The runtime's ``evidence.granted`` (:class:`imprint.contracts.runtime.EvidenceGranted`),
        the same fact, as the run's Publication log keeps it: what P7 lets the run cite."""

        class_version = 1
        source_id: str
        scope: str
        owner_account_id: str
        title: str

        def apply(self, run: PublicationRun) -> None:
            run.grants[self.source_id] = Grant(self.source_id, self.scope, self.owner_account_id, self.title).to_state()  # type: ignore[arg-type]

    class NumericIssued(Aggregate.Event):
        class_version = 1
        handle_id: str
        value: str
        unit: str
        version: int
        source_id: str | None

        def apply(self, run: PublicationRun) -> None:
            run.numerics[self.handle_id] = NumericValue(self.handle_id, self.value, self.unit, self.version,
                                                        self.source_id).to_state()

    class CandidateRefused(Aggregate.Event):
        """P2: a message that never became a candidate, and why."""

        class_version = 1
        reason: str
        detail: str
        message_type: str
        candidate_id: str | None

        def apply(self, run: PublicationRun) -> None:
            run.refusals += 1

    class PreviewQuotaConsumed(Aggregate.Event):
        """P13: a previewed modification has used quota, whatever its commit does."""

        class_version = 1
        candidate_id: str
        block_index: int
        block_id: str
        quota_key: str

        def apply(self, run: PublicationRun) -> None:
            run._consume(self.quota_key, self.block_id)

    class BlockRevisionCommitted(BlockSettled):
        class_version = 1
        block: dict[str, Any]
        """The settled :class:`BlockView`, JSON-shaped (no receipt: the event is the receipt)."""
        receipt_id: str
        is_modification: bool
        target: str | None
        quota_key: str | None
        fingerprint: str
        labels: list[str]

        def receipt(self) -> dict[str, Any]:
            return {
                "receipt_id": self.receipt_id,
                "log_position": self.originator_version,
                "committed_at": self.timestamp.isoformat(),
            }

        def apply(self, run: PublicationRun) -> None:
            block = self.block
            block_id = block["block_id"]
            previous = run.blocks.get(block_id)
            if previous is not None and run.fingerprints.get(previous["fingerprint"]) == block_id:
                del run.fingerprints[previous["fingerprint"]]
            run.blocks[block_id] = {
                "block_id": block_id,
                "revision": block["revision"],
                "ordinal": block["delivery_ordinal"],
                "candidate_id": self.candidate_id,
                "fingerprint": self.fingerprint,
                "body_sha256": block["body_sha256"],
                "source_hint": block["source_hint"],
                "effective_sources": block.get("effective_sources"),
                "receipt": self.receipt(),
                "withdrawn": None,
            }
            if block.get("depends_on"):  # absent: none (most blocks)
                run.blocks[block_id]["depends_on"] = list(block["depends_on"])
            if self.labels:
                run.blocks[block_id]["labels"] = list(self.labels)
            run.fingerprints.setdefault(self.fingerprint, block_id)
            run.relied_on().update(dict.fromkeys(block.get("effective_sources") or ()))
            run.next_ordinal = max(run.next_ordinal, block["delivery_ordinal"] + 1)
            if self.quota_key is not None:
                run._consume(self.quota_key, block_id)
            run._note(self.candidate_id, self.block_index, "committed", block_id,
                      revision=block["revision"], receipt=self.receipt())

    class CandidateUnchanged(BlockSettled):
        """P11: an exact duplicate; the original receipt is reused."""

        class_version = 1
        block_id: str
        revision: int
        receipt: dict[str, Any]

        def apply(self, run: PublicationRun) -> None:
            run._note(self.candidate_id, self.block_index, "unchanged", self.block_id,
                      revision=self.revision, receipt=self.receipt)

    class BlockRejected(BlockSettled):
        class_version = 1
        reason: str
        detail: str
        """Internal only: may name a private source."""
        block_id: str | None

        def apply(self, run: PublicationRun) -> None:
            run._note(self.candidate_id, self.block_index, "rejected", self.block_id, reason=self.reason)

    class RevisionRejected(BlockSettled):
        class_version = 1
        target_block_id: str
        reason: str
        detail: str

        def apply(self, run: PublicationRun) -> None:
            run._note(self.candidate_id, self.block_index, "revision_rejected", self.target_block_id,
                      reason=self.reason)

    class BlockWithdrawn(Aggregate.Event):
        """P21: removed from current display; the committed history stays."""

        class_version = 1
        run_id: str
        block_id: str
        revision: int
        cause: str
        source_id: str | None

        def apply(self, run: PublicationRun) -> None:
            record = run.blocks[self.block_id]
            record["withdrawn"] = {"cause": self.cause, "source_id": self.source_id}
            if run.fingerprints.get(record["fingerprint"]) == self.block_id:
                del run.fingerprints[record["fingerprint"]]

    class SourceStandingChanged(Aggregate.Event):
        """P21: a source this run relied on was revoked or tombstoned. Noted on the run
        itself even when no live block was left to withdraw, so that (a) the run's own
        state knows the source's new standing and (b) any instance holding an older copy
        of the run loses its next write on the run's version and reloads."""

        class_version = 1
        source_id: str
        cause: str
        account_id: str | None

        def apply(self, run: PublicationRun) -> None:
            changes = run.__dict__.setdefault("source_changes", {})
            note_revocation(changes.setdefault(self.source_id, no_revocation()),
                            tombstoned=self.cause == "source_tombstoned", account_id=self.account_id)

    class ConversationDeleted(Aggregate.Event):
        """X8: the run's conversation was deleted; the run takes no new body. On the run
        itself, so an instance holding an older copy of the run loses its next write."""

        class_version = 1
        reason: str

        def apply(self, run: PublicationRun) -> None:
            run.conversation_deleted = True

    class SaveFailed(Aggregate.Event):
        """P15: the commit was not made; a failure fact, never a promoted preview."""

        class_version = 1
        run_id: str
        candidate_id: str
        block_ids: list[str]
        error: str

        def apply(self, run: PublicationRun) -> None:
            run.save_failures[self.candidate_id] = self.error

    class Ended(Aggregate.Event):
        """The runtime's terminal event reached Publication: every earlier proposal of
        the run is settled in the log before this."""

        class_version = 1
        run_id: str
        state: str

        def apply(self, run: PublicationRun) -> None:
            run.ended = self.state

    class LeaseLapsed(Aggregate.Event):
        """X10: the Journal closed the run because its runtime fell silent past its lease
        (``run.lease_lapsed``). Whatever that runtime proposes from now on is refused."""
        class_version = 1

        run_id: str
        reason: str

        def apply(self, run: PublicationRun) -> None:
            run.lapsed = self.reason

    class Reconciled(Aggregate.Event):
        """R7: a recovery finding, recorded as a fact of its own. It changes no
        block, settles no candidate and is announced nowhere: recovery never
        re-runs model work and never promotes a preview."""

        class_version = 1
        run_id: str
        kind: str
        candidate_id: str | None
        block_id: str | None
        revision: int | None
        detail: str

        def apply(self, run: PublicationRun) -> None:
            # ``setdefault``: a run restored from a snapshot older than this event type has no such attribute.
            reconciled = run.__dict__.setdefault("reconciled", {})
            reconciled[reconciliation_key(self.kind, self.candidate_id, self.block_id, self.revision)] = {
                "kind": self.kind, "candidate_id": self.candidate_id, "block_id": self.block_id,
                "revision": self.revision, "detail": self.detail, "log_position": self.originator_version,
            }

    # ----------------------------------------------------------- state helpers

    def _consume(self, key: str, block_id: str) -> None:
        if key in self.consumed:
            return
        self.consumed[key] = block_id
        self.block_modifications[block_id] = self.block_modifications.get(block_id, 0) + 1
        self.run_modifications += 1

    def _note(self, candidate_id: str, block_index: int, kind: OutcomeKind, block_id: str | None, *,
              revision: int | None = None, reason: str | None = None, receipt: Any = None) -> None:
        """How one block of ``candidate_id`` ended (read back as a :class:`BlockOutcome`)."""
        self.candidates.setdefault(candidate_id, []).append({
            "block_index": block_index, "kind": kind, "block_id": block_id,
            "revision": revision, "reason": reason, "receipt": receipt,
        })

    # ------------------------------------------------------------------- reads

    def facts(self) -> RunFacts:
        """A typed view of the current state, valid until the next command."""
        return RunFacts(
            run_id=self.run_id,
            account_id=self.account_id,
            grants=StateView(self.grants, Grant.from_state),
            numerics=StateView(self.numerics, NumericValue.from_state),
            blocks=StateView(self.blocks, BlockRecord.from_state),
            fingerprints=self.fingerprints,
            consumed=self.consumed,
            block_modifications=self.block_modifications,
            run_modifications=self.run_modifications,
            next_ordinal=self.next_ordinal,
        )

    def block(self, block_id: str) -> BlockRecord | None:
        state = self.blocks.get(block_id)
        return None if state is None else BlockRecord.from_state(state)

    def live_blocks(self) -> list[BlockRecord]:
        """The current answer of this run, in delivery order."""
        records = [BlockRecord.from_state(s) for s in self.blocks.values() if s["withdrawn"] is None]
        return sorted(records, key=lambda r: r.ordinal)

    def settled(self, candidate_id: str) -> CandidateOutcome | None:
        """How a candidate was settled, or ``None`` if no settlement was committed."""
        outcomes = self.candidates.get(candidate_id)
        return None if outcomes is None else CandidateOutcome.from_state(candidate_id, outcomes)

    def relied_on(self) -> dict[str, None]:
        """Every source a committed block of this run has ever stood on (never shrinks):
        the run is recorded as a dependent of each once. Rebuilt from the blocks for a
        run restored from a snapshot older than this field."""
        relied = self.__dict__.get("relied")
        if relied is None:
            relied = self.__dict__["relied"] = {
                source_id: None for state in self.blocks.values() for source_id in state.get("effective_sources") or ()
            }
        return relied

    @property
    def deleted(self) -> bool:
        """X8: the run's conversation was deleted."""
        return self.conversation_deleted

    @property
    def has_ended(self) -> bool:
        """The runtime's terminal event (or the Journal's lease lapse) reached the run: every
        proposal it made is settled in the log before that."""
        return self.ended is not None

    @property
    def lost(self) -> str | None:
        """X10: why the Journal closed the run when its lease lapsed."""
        return self.lapsed

    def noted_standing(self, facts: SourceFacts) -> SourceFacts:
        """``facts`` from the registry, with the revocations this run has noted itself (P21)."""
        return with_noted(facts, self.__dict__.get("source_changes", {}).get(facts.source_id))

    def reconciliations(self) -> dict[str, dict[str, Any]]:
        """R7: the recovery findings recorded on this run, by :func:`reconciliation_key`."""
        return dict(self.__dict__.get("reconciled", {}))

    # ---------------------------------------------------------------- commands

    def note_admission(self, account_id: str, conversation_id: str) -> bool:
        """``run.admitted`` binds the run to its account. The first binding wins;
        a redelivery appends nothing."""
        if self.account_id is not None:
            return False
        self.trigger_event(self.Admitted, account_id=account_id, conversation_id=conversation_id)
        return True

    def grant_evidence(self, source_id: str, scope: str, owner_account_id: str, title: str = "") -> bool:
        """``evidence.granted`` (P7). Idempotent."""
        if self.grants.get(source_id) == Grant(source_id, scope, owner_account_id, title).to_state():  # type: ignore[arg-type]
            return False
        self.trigger_event(self.EvidenceGranted, scope=scope, source_id=source_id,
                           owner_account_id=owner_account_id, title=title)
        return True

    def issue_numeric(
        self, handle_id: str, value: Decimal | str, unit: str, version: int, source_id: str | None = None
    ) -> bool:
        """``numeric.issued`` (P9). Only a newer version replaces the current one."""
        current = self.numerics.get(handle_id)
        if current is not None and current["version"] >= version:
            return False
        self.trigger_event(self.NumericIssued, handle_id=handle_id, value=str(Decimal(value)), unit=unit,
                           version=version, source_id=source_id)
        return True

    def refuse_candidate(self, refusal: IntakeRefusal) -> None:
        """P2: record why a message never became a candidate."""
        self.trigger_event(self.CandidateRefused, reason=refusal.reason, detail=refusal.detail,
                           message_type=refusal.message_type, candidate_id=refusal.candidate_id)

    def consume_preview_quota(self, candidate_id: str, block_index: int, block_id: str) -> bool:
        """P13: call (and save) before showing a modification as a preview. Counted
        once per (candidate, block index), whatever happens to the commit."""
        key = quota_key(candidate_id, block_index)
        if key in self.consumed:
            return False
        self.trigger_event(self.PreviewQuotaConsumed, candidate_id=candidate_id, block_index=block_index,
                           block_id=block_id, quota_key=key)
        return True

    def prepare(
        self, candidate: Candidate, standing: SourceStanding = EMPTY_STANDING, policy: Policy = DEFAULT_POLICY
    ) -> tuple[decisions.BlockDecision, ...]:
        """The decisions :meth:`settle` would make now, without recording them
        (what previews are built from). ``()`` if the candidate is settled already."""
        self._check_run(candidate)
        if candidate.candidate_id in self.candidates:
            return ()
        return decisions.settle(candidate, self.facts(), standing, policy)

    def settle(
        self, candidate: Candidate, standing: SourceStanding = EMPTY_STANDING, policy: Policy = DEFAULT_POLICY
    ) -> tuple[decisions.BlockDecision, ...]:
        """Settle a candidate and record every block's outcome. A candidate that is
        already settled (a redelivery) appends nothing and returns ``()``: read
        :meth:`settled` for its outcome."""
        settled_now = self.prepare(candidate, standing, policy)
        self.record_settlement(candidate.candidate_id, settled_now)
        return settled_now

    def record_settlement(self, candidate_id: str, settled: tuple[decisions.BlockDecision, ...]) -> None:
        """Record decisions :meth:`prepare` made (once) for ``candidate_id``: what was
        previewed is what is committed, never a second computation. Nothing is
        recorded for a candidate that is settled already."""
        if candidate_id in self.candidates:
            return
        for decision in settled:
            self._record(candidate_id, decision)

    def _record(self, candidate_id: str, decision: decisions.BlockDecision) -> None:
        settled = {"run_id": self.run_id, "candidate_id": candidate_id, "block_index": decision.block_index}
        if isinstance(decision, decisions.Commit):
            block = decision.block
            self.trigger_event(
                self.BlockRevisionCommitted, **settled, block=dict(decision.state),
                receipt_id=receipt_id_for(block.block_id, block.revision),
                is_modification=decision.is_modification, target=decision.target, quota_key=decision.quota_key,
                fingerprint=decision.fingerprint, labels=list(decision.labels),
            )
        elif isinstance(decision, decisions.Unchanged):
            self.trigger_event(self.CandidateUnchanged, **settled, block_id=decision.block_id, revision=decision.revision,
                               receipt=decision.receipt.model_dump(mode="json"))
        elif isinstance(decision, decisions.Rejected):
            self.trigger_event(self.BlockRejected, **settled, reason=decision.reason, detail=decision.detail,
                               block_id=decision.block_id)
        else:
            self.trigger_event(self.RevisionRejected, **settled, target_block_id=decision.target,
                               reason=decision.reason, detail=decision.detail)

    def withdraw_for_source(
        self, source_id: str, cause: WithdrawalCause = "source_revoked", account_id: str | None = None
    ) -> list[str]:
        """P21: withdraw every live block that relies on ``source_id``, directly or
        through dependencies. ``account_id`` scopes a per-account revocation: a
        run of another account is untouched (an unknown account is not spared)."""
        if account_id is not None and self.account_id is not None and account_id != self.account_id:
            return []
        self.trigger_event(self.SourceStandingChanged, source_id=source_id, cause=cause, account_id=account_id)
        withdrawn = blocks_to_withdraw(self.facts().blocks, source_id)
        for block_id in withdrawn:
            self.trigger_event(self.BlockWithdrawn, run_id=self.run_id, block_id=block_id,
                               revision=self.blocks[block_id]["revision"], cause=cause, source_id=source_id)
        return withdrawn

    def delete_conversation(self, reason: str) -> list[str]:
        """X8: withdraw every live block and take no new body from now on. Once."""
        withdrawn = self.withdraw_all("conversation_deleted")
        if not self.deleted:
            self.trigger_event(self.ConversationDeleted, reason=reason)
        return withdrawn

    def withdraw_all(self, cause: WithdrawalCause = "conversation_deleted") -> list[str]:
        withdrawn = [record.block_id for record in self.live_blocks()]
        for block_id in withdrawn:
            self.trigger_event(self.BlockWithdrawn, run_id=self.run_id, block_id=block_id,
                               revision=self.blocks[block_id]["revision"], cause=cause, source_id=None)
        return withdrawn

    def end(self, state: str) -> bool:
        """Record that the run ended (``completed``, ``failed``, …). Once; later proposals are still
        settled, but for a run that ended ``stopped`` (X11: refused, ``run_stopped``)."""
        if self.has_ended:
            return False
        self.trigger_event(self.Ended, run_id=self.run_id, state=state)
        return True

    def lose(self, reason: str) -> bool:
        """X10: the run's lease lapsed and the Journal closed it ``failed``. The run ends here
        unless the runtime's own terminal event came first (then that end stays); from now on
        nothing that runtime proposes is settled. Once."""
        if self.lost is not None:
            return False
        self.end("failed")
        self.trigger_event(self.LeaseLapsed, run_id=self.run_id, reason=reason)
        return True

    def record_save_failure(self, candidate_id: str, error: str, block_ids: Iterable[str] = ()) -> None:
        """P15: the database refused the commit. Recorded as a fact of its own, on a
        run read back from the store (the failed events were never saved)."""
        self.trigger_event(self.SaveFailed, run_id=self.run_id, candidate_id=candidate_id,
                           block_ids=list(block_ids), error=error[:MAX_ERROR_CHARS])

    def reconcile(
        self, kind: ReconciliationKind, candidate_id: str | None = None, block_id: str | None = None,
        revision: int | None = None, detail: str = "",
    ) -> bool:
        """R7: record one recovery finding. Idempotent per (kind, candidate, block, revision)."""
        if reconciliation_key(kind, candidate_id, block_id, revision) in self.reconciliations():
            return False
        self.trigger_event(self.Reconciled, run_id=self.run_id, kind=kind, candidate_id=candidate_id,
                           block_id=block_id, revision=revision, detail=detail[:MAX_ERROR_CHARS])
        return True

    def _check_run(self, candidate: Candidate) -> None:
        if candidate.run_id != self.run_id:
            raise ValueError(f"candidate of run {candidate.run_id!r} settled on run {self.run_id!r}")

"""R7 (with P15, P19): the recovery report of a run, from the Publication log alone.

Four questions, each answered from committed events, and the run's lifecycle as its log holds it:

``committed_blocks`` / ``committed_unjournaled`` (R2, R5)
    Every block revision Publication committed. Publication is the authority
    on what was committed; the runtime journal is never consulted for the
    answer view. *Which* of them the journal never recorded is the journal's
    knowledge: pass ``journaled`` (block ids, or (block id, revision) pairs, the
    journal observed — see :class:`imprint.recovery.journal_facts.JournalRun`) to
    get the list; a block counts as journaled only if the journal saw its current
    revision. Without it the report says the journal was not consulted and lists
    nothing as unjournaled rather than guessing.
``missing_tool_receipts`` (P19)
    Effects of ``tool:`` candidates that settled (committed or unchanged). Tool
    receipts are the journal's facts: pass ``tool_receipts`` (tool_call_id →
    ``ok``/``failed``/``unknown``) and effects whose receipt is not ``ok`` are
    listed as ``missing``/``failed``/``unknown``; without it every settled
    tool effect is listed with ``receipt_not_known_to_publication``. The
    effect is confirmed through its candidate identity; nothing is re-run.
``save_unknowns`` (P15)
    Save-failure facts in the log, plus save-unknowns the caller saw on
    ``imprint.publication.v1`` (``save_unknowns``: candidate ids — the log
    holds no record of an unconfirmed commit). Each is resolved by reading the
    candidate identity back: a later settlement resolves it (with its kind);
    none leaves it ``unresolved`` — never assumed committed.
``log_lifecycle`` (P20, X8, X10)
    What the run's own log holds of its lifecycle: the end that reached Publication
    (``Ended``), a lease lapse, its conversation's deletion. Shown as the log holds
    them: an end is no claim of success, and a committed block stays committed after it.
``previews_never_committed`` (P13, P14)
    Previewed modifications (their quota fact is in the log) whose block was
    never committed by that candidate. A preview of a new block leaves no
    fact in the log, so it cannot be listed here. A preview is never promoted.

:func:`pending_reconciliations` lists the :class:`Reconciliation` facts
``imprint recover --apply`` appends: findings only — no candidate is settled,
no block changes, no model work is re-run, no preview becomes a commit.

No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping

from imprint.publication.candidate import candidate_id_for
from imprint.publication.run import ReconciliationKind, reconciliation_key
from imprint.recovery.integrity import defect_of
from imprint.recovery.run_ledger import RunLedger

TOOL_PREFIX = "tool:"
ReceiptStatus = Literal["missing", "failed", "unknown", "receipt_not_known_to_publication"]

JOURNAL_NOT_CONSULTED = (
    "the runtime journal was not consulted: every committed block above is in the answer view "
    "regardless (R2); which ones the journal never recorded is the journal's knowledge"
)
RECEIPTS_NOT_CONSULTED = "tool receipts are the journal's facts; none were supplied to this report"
NEW_BLOCK_PREVIEWS = "only previewed modifications leave a fact in the log (their quota); new-block previews leave none"


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One finding ``--apply`` records on the run (``PublicationRun.reconcile``)."""

    run_id: str
    kind: ReconciliationKind
    candidate_id: str | None
    block_id: str | None
    revision: int | None
    detail: str = ""

    @property
    def key(self) -> str:
        return reconciliation_key(self.kind, self.candidate_id, self.block_id, self.revision)


def tool_call_id_of(candidate_id: str) -> str | None:
    """The tool call of a ``tool:`` candidate; ``None`` when the id is a digest of a long one."""
    if not candidate_id.startswith(TOOL_PREFIX):
        return None
    rest = candidate_id[len(TOOL_PREFIX):]
    return None if rest.startswith("~") else rest


def recovery_report(
    ledger: RunLedger,
    *,
    journaled: Collection[str | tuple[str, int]] | None = None,
    tool_receipts: Mapping[str, str] | None = None,
    save_unknowns: Collection[str] | None = None,
    journal_note: str | None = None,
) -> dict[str, Any]:
    reconciled = ledger.reconciled

    def done(kind: str, candidate_id: str | None, block_id: str | None, revision: int | None) -> bool:
        return reconciliation_key(kind, candidate_id, block_id, revision) in reconciled

    # -- committed blocks (R2) ---------------------------------------------------------------
    committed: list[dict[str, Any]] = []
    for history in ledger.in_delivery_order():
        current = history.current
        defect = defect_of(current)
        committed.append({
            "block_id": history.block_id,
            "revision": current.revision,
            "revisions": len(history.revisions),
            "delivery_ordinal": history.ordinal,
            "candidate_id": current.candidate_id,
            "receipt_id": current.receipt_id,
            "log_position": current.receipt.get("log_position"),
            "status": "withdrawn" if not history.live else ("withheld" if defect else "live"),
            "integrity": defect or "ok",
            "journaled": None if journaled is None else (
                history.block_id in journaled or (history.block_id, current.revision) in journaled),
        })
    if journaled is None:
        unjournaled: dict[str, Any] = {"journal_consulted": False, "blocks": None, "note": JOURNAL_NOT_CONSULTED}
    else:
        unjournaled = {"journal_consulted": True, **({"note": journal_note} if journal_note else {}), "blocks": [
            {**{k: b[k] for k in ("block_id", "revision", "candidate_id", "receipt_id", "status")},
             "reconciled": done("committed_unjournaled", b["candidate_id"], b["block_id"], b["revision"])}
            for b in committed if not b["journaled"]
        ]}

    # -- settled tool effects whose receipt is missing (P19) ---------------------------------
    receipts: dict[str, str] | None = None
    if tool_receipts is not None:
        receipts = {candidate_id_for("tool", call): status for call, status in tool_receipts.items()}
    effects: list[dict[str, Any]] = []
    for candidate_id, settlements in ledger.settlements.items():
        if not candidate_id.startswith(TOOL_PREFIX):
            continue
        settled = [s for s in settlements if s["kind"] in ("committed", "unchanged")]
        if not settled:
            continue
        status: ReceiptStatus
        if receipts is None:
            status = "receipt_not_known_to_publication"
        else:
            known = receipts.get(candidate_id)
            if known == "ok":
                continue
            status = "missing" if known is None else ("failed" if known == "failed" else "unknown")
        effects.append({
            "candidate_id": candidate_id,
            "tool_call_id": tool_call_id_of(candidate_id),
            "effects": [{"block_index": s["block_index"], "kind": s["kind"], "block_id": s["block_id"],
                         "revision": s["revision"], "receipt_id": (s.get("receipt") or {}).get("receipt_id"),
                         "reconciled": done("effect_confirmed", candidate_id, s["block_id"], s["revision"])}
                        for s in settled],
            "receipt": status,
            "confirmed_by": "candidate identity in the Publication log",
        })
    effects.sort(key=lambda e: e["candidate_id"])

    # -- save failures and save-unknowns (P15) ------------------------------------------------
    unresolved: list[dict[str, Any]] = []
    resolved: list[dict[str, Any]] = []
    facts: list[tuple[str, str, int, dict[str, Any]]] = [
        ("save_failed", f["candidate_id"], f["log_position"], {"error": f["error"], "block_ids": f["block_ids"]})
        for f in ledger.save_failures
    ]
    for candidate_id in sorted(set(save_unknowns or ())):
        facts.append(("save_unknown", candidate_id, -1, {"block_ids": []}))
    for fact, candidate_id, position, extra in facts:
        later = ledger.settled_after(candidate_id, position)
        item = {"fact": fact, "candidate_id": candidate_id, "log_position": None if position < 0 else position, **extra}
        if later:
            resolved.append({**item, "resolution": sorted({s["kind"] for s in later}),
                             "blocks": [s["block_id"] for s in later if s["kind"] in ("committed", "unchanged")],
                             "reconciled": done("save_resolved", candidate_id, None, None)})
        else:
            unresolved.append({**item, "read_back": "no settlement of this candidate in the log",
                               "reconciled": done("save_not_committed", candidate_id, None, None)})

    # -- previews never committed (P13, P14) ----------------------------------------------------
    previews: list[dict[str, Any]] = []
    for fact in ledger.preview_quota:
        mine = [s for s in ledger.settlements.get(fact["candidate_id"], ()) if s["block_index"] == fact["block_index"]]
        if any(s["kind"] in ("committed", "unchanged") for s in mine):
            continue
        previews.append({
            "candidate_id": fact["candidate_id"],
            "block_index": fact["block_index"],
            "block_id": fact["block_id"],
            "log_position": fact["log_position"],
            "settlement": mine[-1]["kind"] if mine else None,
            "reason": mine[-1]["reason"] if mine else None,
            "reconciled": done("preview_not_committed", fact["candidate_id"], fact["block_id"], None),
        })

    return {
        "run_id": ledger.run_id,
        "account_id": ledger.account_id,
        "log_version": ledger.version,
        "log_lifecycle": ledger.lifecycle(),
        "committed_blocks": committed,
        "committed_unjournaled": unjournaled,
        "missing_tool_receipts": {
            "receipts_consulted": tool_receipts is not None,
            "effects": effects,
            **({} if tool_receipts is not None else {"note": RECEIPTS_NOT_CONSULTED}),
        },
        "save_unknowns": {"unresolved": unresolved, "resolved": resolved},
        "previews_never_committed": {"previews": previews, "note": NEW_BLOCK_PREVIEWS},
        "defects": [{"log_position": d.log_position, "reason": d.reason, "detail": d.detail, "block_id": d.block_id}
                    for d in ledger.defects],
        "reconciled": sorted(ledger.reconciled.values(), key=lambda r: r["log_position"] or 0),
    }


def pending_reconciliations(report: Mapping[str, Any]) -> list[Reconciliation]:
    """The findings of ``report`` not yet recorded on its run, in report order."""
    run_id = report["run_id"]
    pending: list[Reconciliation] = []
    unjournaled = report["committed_unjournaled"]
    for block in unjournaled["blocks"] or ():
        if not block["reconciled"]:
            pending.append(Reconciliation(run_id, "committed_unjournaled", block["candidate_id"], block["block_id"],
                                          block["revision"], "committed in Publication; not in the journal"))
    for effect in report["missing_tool_receipts"]["effects"]:
        for settled in effect["effects"]:
            if settled["reconciled"]:
                continue
            pending.append(Reconciliation(run_id, "effect_confirmed", effect["candidate_id"], settled["block_id"],
                                          settled["revision"], f"{settled['kind']}; receipt {effect['receipt']}"))
    for item in report["save_unknowns"]["resolved"]:
        if not item["reconciled"]:
            pending.append(Reconciliation(run_id, "save_resolved", item["candidate_id"], None, None,
                                          f"{item['fact']} resolved by read-back: {','.join(item['resolution'])}"))
    for item in report["save_unknowns"]["unresolved"]:
        if not item["reconciled"]:
            pending.append(Reconciliation(run_id, "save_not_committed", item["candidate_id"], None, None,
                                          f"{item['fact']}: no settlement of this candidate in the log"))
    for preview in report["previews_never_committed"]["previews"]:
        if not preview["reconciled"]:
            pending.append(Reconciliation(run_id, "preview_not_committed", preview["candidate_id"],
                                          preview["block_id"], None,
                                          f"previewed, never committed (settlement: {preview['settlement']})"))
    seen: set[str] = set()
    unique: list[Reconciliation] = []
    for item in pending:
        if item.key in seen:
            continue
        seen.add(item.key)
        unique.append(item)
    return unique

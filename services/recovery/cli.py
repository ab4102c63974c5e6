"""``imprint replay|recover|export``: recovery tooling over the Publication log (SPEC §4).

Every command reads the Publication event log through
:func:`services.publication.service.open_log` — never the runtime journal —
and prints JSON on stdout (logs go to stderr).

``replay [--run R] [--verify]``
    One JSON line per run: ``{"run_id", "sha256", "view"}`` (R1). ``--verify``
    replays the log twice up to the same position and compares every hash,
    and compares the views with the run aggregates as the repository rebuilds
    them (snapshots included); a last line reports the verdict. Exit 1 on any
    mismatch.
``recover [--run R] [--apply]``
    The recovery report as one JSON document (R7). ``--apply`` appends the
    report's findings as ``Reconciled`` facts (idempotently) and prints the
    report as it stands afterwards, with what was appended.
``export --run R``
    The run's full committed history as one JSON document (P21).

Exit codes: 0 done, 1 verification failed, 2 no such run."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Any, TextIO

from imprint.publication import EMPTY_STANDING
from imprint.recovery import (
    ProtectedRead,
    answer_views,
    export_history,
    pending_reconciliations,
    read_protected,
    recovery_report,
    view_hash,
)
from services.common.settings import Settings
from services.publication.application import PublicationLog
from services.publication.service import open_log
from services.recovery.log_reader import (
    aggregate_blocks,
    apply_reconciliations,
    current_bound,
    read_fold,
    read_ledger,
    standing_for_block,
)

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_NO_RUN = 2


def _dump(value: Any, *, pretty: bool = False) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, indent=2 if pretty else None)


def _no_run(run_id: str, err: TextIO) -> int:
    print(f"run {run_id!r} is not in the Publication log", file=err)
    return EXIT_NO_RUN


# --------------------------------------------------------------------------------- replay

def replay(settings: Settings, run_id: str | None = None, verify: bool = False, *,
           out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    try:
        return _replay(app, run_id, verify, out, err)
    finally:
        app.close()


def _replay(app: PublicationLog, run_id: str | None, verify: bool, out: TextIO, err: TextIO) -> int:
    bound = current_bound(app, run_id)
    fold = read_fold(app, run_id, bound)
    views = answer_views(fold, run_id)
    if run_id is not None and run_id not in views:
        return _no_run(run_id, err)
    hashes = {r: view_hash(view) for r, view in views.items()}
    for r, view in views.items():
        print(_dump({"run_id": r, "sha256": hashes[r], "view": view}), file=out)
    if not verify:
        return EXIT_OK

    again = {r: view_hash(view) for r, view in answer_views(read_fold(app, run_id, bound), run_id).items()}
    mismatches = sorted(r for r in set(hashes) | set(again) if hashes.get(r) != again.get(r))
    disagreements: list[dict[str, Any]] = []
    for r, view in views.items():
        ledger = fold.runs[r]
        aggregate = aggregate_blocks(app, ledger)
        if aggregate is None:
            disagreements.append({"run_id": r, "why": "run aggregate could not be rebuilt"})
            continue
        withheld = {w["block_id"] for w in view["withheld"] if w["block_id"] is not None}
        served = {b["block_id"]: b for b in view["blocks"]}
        if set(aggregate) != set(served) | withheld:
            disagreements.append({"run_id": r, "why": "live blocks differ",
                                  "log": sorted(set(served) | withheld), "aggregate": sorted(aggregate)})
            continue
        differing = sorted(b for b, block in served.items() if aggregate[b] != block)
        if differing:
            disagreements.append({"run_id": r, "why": "block revisions differ", "blocks": differing})
    verified = not mismatches and not disagreements
    print(_dump({"verify": {
        "verified": verified,
        "runs": len(views),
        "replays_agree": not mismatches,
        "mismatched_runs": mismatches,
        "aggregates_agree": not disagreements,
        "aggregate_disagreements": disagreements,
        "bound": bound.notification_id if run_id is None else bound.version,
    }}), file=out)
    if not verified:
        print("replay verification FAILED", file=err)
    return EXIT_OK if verified else EXIT_MISMATCH


# -------------------------------------------------------------------------------- recover

def recover(
    settings: Settings,
    run_id: str | None = None,
    apply: bool = False,
    *,
    journaled: Mapping[str, Collection[str]] | None = None,
    tool_receipts: Mapping[str, Mapping[str, str]] | None = None,
    save_unknowns: Mapping[str, Collection[str]] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``journaled``, ``tool_receipts`` and ``save_unknowns`` are per-run facts a caller
    may bring from elsewhere (the journal, ``imprint.publication.v1``); the command
    line brings none, and the report says so."""
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    try:
        reports = _reports(app, run_id, journaled, tool_receipts, save_unknowns)
        if reports is None:
            return _no_run(run_id or "", err)
        applied: list[dict[str, Any]] | None = None
        if apply:
            applied = []
            for report in reports:
                applied.extend(apply_reconciliations(app, report["run_id"], pending_reconciliations(report)))
            reports = _reports(app, run_id, journaled, tool_receipts, save_unknowns) or []
        print(_dump({
            "source": "publication event log",
            "runs": reports,
            "apply": apply,
            "applied": applied,
        }, pretty=True), file=out)
        return EXIT_OK
    finally:
        app.close()


def _reports(
    app: PublicationLog,
    run_id: str | None,
    journaled: Mapping[str, Collection[str]] | None,
    tool_receipts: Mapping[str, Mapping[str, str]] | None,
    save_unknowns: Mapping[str, Collection[str]] | None,
) -> list[dict[str, Any]] | None:
    fold = read_fold(app, run_id)
    if run_id is not None and run_id not in fold.runs:
        return None
    run_ids = sorted(fold.runs) if run_id is None else [run_id]
    return [
        recovery_report(
            fold.runs[r],
            journaled=None if journaled is None else journaled.get(r, ()),
            tool_receipts=None if tool_receipts is None else tool_receipts.get(r, {}),
            save_unknowns=None if save_unknowns is None else save_unknowns.get(r, ()),
        )
        for r in run_ids
    ]


# --------------------------------------------------------------------------------- export

def export(settings: Settings, run_id: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    try:
        ledger = read_ledger(app, run_id)
        if ledger is None:
            return _no_run(run_id, err)
        print(_dump(export_history(ledger), pretty=True), file=out)
        return EXIT_OK
    finally:
        app.close()


# ----------------------------------------------------------------------- protected read

def read_block(settings: Settings, run_id: str, block_id: str, receipt_id: str, account_id: str | None) -> ProtectedRead:
    """R3: one committed block by run, block and receipt, re-checked under current
    authorization (account, sources through the registry, inherited dependencies)."""
    app = open_log(settings)
    try:
        return read_block_from(app, run_id, block_id, receipt_id, account_id)
    finally:
        app.close()


def read_block_from(
    app: PublicationLog, run_id: str, block_id: str, receipt_id: str, account_id: str | None
) -> ProtectedRead:
    ledger = read_ledger(app, run_id)
    standing = EMPTY_STANDING if ledger is None else standing_for_block(app, ledger, block_id)
    return read_protected(ledger, block_id, receipt_id, account_id=account_id, standing=standing, run_id=run_id)

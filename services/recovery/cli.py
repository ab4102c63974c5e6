"""``imprint replay|recover|export|inspect``: recovery tooling over the Publication log (SPEC §4).

Every command reads the Publication event log through
:func:`services.publication.service.open_log`; the runtime journal is read only to
*compare* (``recover``, ``inspect``), never to build a view. Output is a human
table (``output="table"``, the command line's default) or JSON (``--json``); logs
go to stderr, and so do progress bars (on a terminal only).

``replay [--run R] [--verify] [--bodies] [--workers N]``
    JSON: one line per run, ``{"run_id", "sha256", "view"}`` (R1), written as each
    run is folded (a page of runs in memory at a time), in the order the runs were
    opened. Without ``--verify`` the runs are folded by ``N`` worker processes (default:
    up to 2, one per core), each reading its own pages of runs; their output is written
    in the same order, with at most a few pages in flight. Bodies are left out (the content
    keeps its type and length) unless ``--bodies``; the hash is always over the
    whole view. ``--verify`` replays each run twice at the same version and compares
    the hashes, compares the view with the run aggregate as the repository rebuilds
    it (snapshots included; what the aggregate keeps of each block:
    :data:`~services.recovery.log_reader.AGGREGATE_FIELDS`) and checks the integrity
    of every committed revision (:mod:`imprint.recovery.verification`); each run's
    line then carries its ``integrity`` verdict and a last line the overall verdict,
    naming every run and block that fails and why. Exit 1 on any failure.
``recover [--run R] [--apply]``
    The recovery report (R7), with the journal's store consulted read-only
    (committed-but-unjournaled blocks, settled effects whose tool receipt the
    journal lacks) and ``answer.save_unknown`` read back from
    ``imprint.publication.v1``. ``--apply`` appends the findings as ``Reconciled``
    facts (idempotently; never re-runs model work) and reports what it appended.
``export --run R``
    The run's full committed history as one JSON document (P21).
``inspect --run R``
    The run's timeline (:mod:`imprint.recovery.timeline`), with Delivery's report of who
    saw each withdrawn block revision and whether each client received the withdrawal (D7).
``inspect --conversation C``
    The conversation's questions in order, the policy each met the queue under, what the
    policy did and how each ended (X12, :mod:`imprint.recovery.conversation`), from the
    Journal's store; any question left without an end is listed as unaccounted.

Exit codes: 0 done, 1 verification failed, 2 no such run.

The commands are here; the replay's folding and checks are :mod:`services.recovery.replaying`,
the inspector's sources :mod:`services.recovery.inspection`, and how a result is written
:mod:`services.recovery.output` and :mod:`services.recovery.render`."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any, TextIO

from imprint.contracts.topics import Topic
from imprint.publication import EMPTY_STANDING
from imprint.recovery import (
    ProtectedRead,
    RunLedger,
    export_history,
    pending_reconciliations,
    read_protected,
    recovery_report,
)
from services.common.lifecycle import GC_THRESHOLD
from services.common.settings import Settings
from services.publication.application import PublicationLog, open_log
from services.recovery import render
from services.recovery.inspection import DeliveredFrames, assemble_timeline, observe_run
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import apply_reconciliations, iter_ledgers, read_ledger, run_index, standing_for_block
from services.recovery.observations import Observations, read_observations
from services.recovery.output import EXIT_NO_RUN, EXIT_OK, Output, dump, no_run, shown
from services.recovery.replaying import default_workers, replay_log


# --------------------------------------------------------------------------------- replay

def replay(settings: Settings, run_id: str | None = None, verify: bool = False, *,
           out: TextIO | None = None, err: TextIO | None = None, output: Output = "json",
           bodies: bool = False, workers: int | None = None) -> int:
    """``workers``: processes that fold the runs (``None``: up to 2, one per core; 1: this
    process). ``--verify`` and ``--run`` always fold here."""
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    threshold = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)  # a page of decoded events at a time, almost all of it acyclic
    try:
        return replay_log(app, run_id, verify, out, err, output, bodies,
                          settings=settings, workers=default_workers() if workers is None else workers)
    finally:
        gc.set_threshold(*threshold)
        app.close()


# -------------------------------------------------------------------------------- recover

def recover(
    settings: Settings,
    run_id: str | None = None,
    apply: bool = False,
    *,
    journaled: Mapping[str, Collection[str]] | None = None,
    tool_receipts: Mapping[str, Mapping[str, str]] | None = None,
    save_unknowns: Mapping[str, Collection[str]] | None = None,
    read_kafka: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
    output: Output = "json",
) -> int:
    """The journal's store is consulted read-only unless the caller brings ``journaled`` and
    ``tool_receipts`` itself; save-unknowns are read from ``imprint.publication.v1`` (unless
    ``read_kafka`` is false or the caller brings ``save_unknowns``)."""
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    journal = JournalReader(settings) if journaled is None or tool_receipts is None else None
    try:
        index = run_index(app)
        run_ids = index.run_ids if run_id is None else [run_id]
        if run_id is not None and read_ledger(app, run_id) is None:
            return no_run(run_id, err)
        announced: Observations = Observations(False, "not read (the caller supplied the save-unknowns)")
        if save_unknowns is None and read_kafka:
            announced = read_observations(settings, run_id, (Topic.PUBLICATION,), frozenset({"answer.save_unknown"}))
            unknowns: dict[str, set[str]] = {}
            for message in announced.messages:
                unknowns.setdefault(message.run_id, set()).add(message.candidate_id)
            save_unknowns = unknowns if announced.available else None

        def reports() -> list[dict[str, Any]]:
            made = []
            for ledger, _ in render.tracked_pairs(iter_ledgers(app, run_ids), len(run_ids), err, "recovering"):
                if ledger is not None:
                    made.append(_report(ledger, journal, journaled, tool_receipts, save_unknowns))
            return made

        found = reports()
        applied: list[dict[str, Any]] | None = None
        if apply:
            applied = []
            for report in found:
                applied.extend(apply_reconciliations(app, report["run_id"], pending_reconciliations(report)))
            found = reports()
        document = {
            "source": "publication event log",
            "journal": ({"availability": journal.availability, "reason": journal.reason} if journal is not None
                        else {"availability": "supplied by the caller", "reason": ""}),
            "announcements": {"available": announced.available, "reason": announced.reason,
                              "save_unknowns": sum(len(v) for v in (save_unknowns or {}).values())},
            "runs": found,
            "apply": apply,
            "applied": applied,
        }
        return shown(document, output, out, render.recover_table)
    finally:
        if journal is not None:
            journal.close()
        app.close()


def _report(
    ledger: RunLedger,
    journal: JournalReader | None,
    journaled: Mapping[str, Collection[str]] | None,
    tool_receipts: Mapping[str, Mapping[str, str]] | None,
    save_unknowns: Mapping[str, Collection[str]] | None,
) -> dict[str, Any]:
    r = ledger.run_id
    seen: Collection[str | tuple[str, int]] | None = None if journaled is None else journaled.get(r, ())
    receipts: Mapping[str, str] | None = None if tool_receipts is None else tool_receipts.get(r, {})
    note = None
    if journal is not None:
        facts = journal.run(r)
        if facts is not None:
            if journaled is None:
                seen = facts.journaled()
            if tool_receipts is None:
                receipts = facts.tool_receipts()
            note = journal.reason or (None if facts.found else "the journal has no record of this run")
    return recovery_report(ledger, journaled=seen, tool_receipts=receipts,
                           save_unknowns=None if save_unknowns is None else save_unknowns.get(r, ()),
                           journal_note=note)


# -------------------------------------------------------------------------------- inspect

def inspect(settings: Settings, run_id: str, *, open_store: Callable[[], DeliveredFrames],
            out: TextIO | None = None, err: TextIO | None = None, output: Output = "json") -> int:
    """One run's timeline; ``open_store`` opens Delivery's store, read for its frames (the
    composition root hands it over: the operator tools read Delivery's store, never import it)."""
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    store = None
    try:
        if read_ledger(app, run_id) is None:
            return no_run(run_id, err)
        try:
            store = open_store()
        except Exception as error:  # noqa: BLE001 — the timeline says the frames are unknown
            print(f"imprint: Delivery's store could not be read ({type(error).__name__}); frames unknown", file=err)
        observed = asyncio.run(observe_run(settings, run_id))
        with JournalReader(settings) as journal:
            document = assemble_timeline(app, run_id, store=store, observed=observed, journal=journal)
        return shown(document, output, out, render.inspect_table)
    finally:
        if store is not None:
            store.close()
        app.close()


def inspect_conversation(settings: Settings, conversation_id: str, *, out: TextIO | None = None,
                         err: TextIO | None = None, output: Output = "json") -> int:
    """X12: one conversation's timeline of questions, policies and outcomes (the Journal's store)."""
    out, err = out or sys.stdout, err or sys.stderr
    with JournalReader(settings) as journal:
        document = journal.conversation(conversation_id)
        if document is None:
            print(f"imprint: {journal.reason}", file=err)
            return EXIT_NO_RUN
    if not document["found"]:
        print(f"imprint: conversation {conversation_id!r} is not in the Journal", file=err)
        return EXIT_NO_RUN
    return shown(document, output, out, render.conversation_table)


# --------------------------------------------------------------------------------- export

def export(settings: Settings, run_id: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    try:
        ledger = read_ledger(app, run_id)
        if ledger is None:
            return no_run(run_id, err)
        print(dump(export_history(ledger), pretty=True), file=out)
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

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

Exit codes: 0 done, 1 verification failed, 2 no such run."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import sys
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from itertools import chain, islice
from typing import Any, Literal, Protocol, TextIO

from imprint.canonical import canonical_json
from imprint.contracts.topics import Topic
from imprint.publication import EMPTY_STANDING
from imprint.publication.candidate import Candidate, intake
from imprint.recovery import (
    Defect,
    Failure,
    Observation,
    ProtectedRead,
    RunLedger,
    SentFrame,
    answer_view,
    hashed_answer_view,
    export_history,
    pending_reconciliations,
    read_protected,
    recovery_report,
    timeline,
    verify_ledger,
    view_hash,
)
from services.common.lifecycle import GC_THRESHOLD, settle_heap
from services.common.settings import Settings
from services.publication.application import PublicationLog, open_log
from services.recovery import render
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import (
    RUNS_PER_READ,
    aggregate_blocks,
    aggregate_form,
    apply_reconciliations,
    current_bound,
    in_pages,
    iter_ledgers,
    opened_runs,
    read_fold,
    read_ledger,
    run_index,
    standing_for_block,
)
from services.recovery.observations import Observations, observe, read_observations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_NO_RUN = 2

Output = Literal["table", "json"]


def _dump(value: Any, *, pretty: bool = False) -> str:
    """A JSON document (``pretty``: indented), or one JSON line: canonical JSON (sorted keys,
    no whitespace), written by orjson (a replay writes a line per run, each as long as the
    run's view). A value that is not JSON-shaped is written with ``str`` for what JSON has no form for."""
    if not pretty:
        try:
            return canonical_json(value)
        except TypeError:
            pass
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, indent=2 if pretty else None)


def _shown(document: Mapping[str, Any], output: str, out: TextIO, table: Callable[[TextIO, Mapping[str, Any]], None]) -> int:
    """A command's one document, as pretty JSON or as its table; the command succeeded."""
    if output == "json":
        print(_dump(document, pretty=True), file=out)
    else:
        table(out, document)
    return EXIT_OK


def _no_run(run_id: str, err: TextIO) -> int:
    print(f"imprint: run {run_id!r} is not in the Publication log", file=err)
    return EXIT_NO_RUN


def without_bodies(view: Mapping[str, Any]) -> dict[str, Any]:
    """The view with each block's text replaced by its type and length (the hash is unchanged)."""
    blocks = []
    for block in view["blocks"]:
        content = block.get("content") or {}
        blocks.append({**block, "content": {"type": content.get("type"),
                                            "length": len(content.get("markdown") or "")}})
    return {**view, "blocks": blocks}


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
        return _replay(app, run_id, verify, out, err, output, bodies,
                       settings=settings, workers=default_workers() if workers is None else workers)
    finally:
        gc.set_threshold(*threshold)
        app.close()


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _replayed(ledger: RunLedger, output: Output, bodies: bool) -> dict[str, Any]:
    """What the replay writes of one run: its view, hash, JSON line (or table row)."""
    view, sha = hashed_answer_view(ledger)
    done: dict[str, Any] = {"run_id": ledger.run_id, "sha256": sha, "view": view,
                            "blocks": len(view["blocks"]), "withheld": len(view["withheld"])}
    if output == "json":
        # a view holds no float (see hashed_answer_view): its canonical JSON is orjson's as written
        done["line"] = canonical_json({"run_id": ledger.run_id, "sha256": sha,
                                       "view": view if bodies else without_bodies(view)}, floats=False)
    return done


_worker_app: PublicationLog | None = None


def _worker_start(settings: Settings) -> None:
    global _worker_app
    _worker_app = open_log(settings)
    settle_heap()  # what the worker imported and opened is never collected; only its pages are looked at


def _worker_fold(run_ids: list[str], output: Output, bodies: bool) -> list[dict[str, Any] | None]:
    """One page of runs in a worker: what :func:`_replayed` makes of each (``None``: no such run).
    The view itself only travels back when the table shows bodies."""
    assert _worker_app is not None
    done: list[dict[str, Any] | None] = []
    for ledger, _ in iter_ledgers(_worker_app, run_ids, audit=False):
        if ledger is None:
            done.append(None)
            continue
        item = _replayed(ledger, output, bodies)
        if not (bodies and output != "json"):
            del item["view"]
        done.append(item)
    return done


def _fanned_out(settings: Settings, run_ids: Iterable[str], workers: int, output: Output, bodies: bool
                ) -> Iterator[dict[str, Any] | None]:
    """The runs folded by ``workers`` processes (spawned: each opens its own log), one page of
    runs per task, yielded in ``run_ids`` order with at most two pages per worker in flight.
    ``run_ids`` is read as pages are handed out: the workers start folding while the rest
    of the log's runs are still being listed. A worker that cannot start or dies raises
    (``BrokenProcessPool``) instead of leaving the replay waiting."""
    pages = in_pages(run_ids, RUNS_PER_READ)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_start, initargs=(settings,)) as pool:
        in_flight: deque[Future[list[dict[str, Any] | None]]] = deque()
        try:
            for page in pages:
                in_flight.append(pool.submit(_worker_fold, page, output, bodies))
                if len(in_flight) >= 2 * workers:
                    yield from in_flight.popleft().result()
            while in_flight:
                yield from in_flight.popleft().result()
        finally:
            for pending in in_flight:
                pending.cancel()


def _replay(app: PublicationLog, run_id: str | None, verify: bool, out: TextIO, err: TextIO,
            output: Output, bodies: bool, *, settings: Settings | None = None, workers: int = 1) -> int:
    bound = current_bound(app).notification_id
    orphans: list[Defect] = []
    found = opened_runs(app, bound, orphans)  # read as the runs are asked for
    if run_id is not None:
        if verify:  # an opening that cannot be decoded may be this run's: it fails the check
            deque(found, maxlen=0)
        found = iter([run_id])
    head = list(islice(found, RUNS_PER_READ + 1))
    rows: list[dict[str, Any]] = []
    shown_bodies: dict[str, list[dict[str, Any]]] = {}
    failures: list[Failure] = []
    totals = {"blocks": 0, "blocks_verified": 0, "revisions": 0, "seals_opened": 0, "shredded": 0}
    mismatches: list[str] = []
    disagreements: list[dict[str, Any]] = []
    runs = 0
    fan_out = settings is not None and workers > 1 and not verify and run_id is None and len(head) > RUNS_PER_READ
    folded: Iterable[tuple[RunLedger | None, Any, dict[str, Any] | None]]
    total: int | None
    if fan_out:
        # the workers start on the first pages while the rest of the runs are listed here
        assert settings is not None
        folded = ((None, None, done) for done in _fanned_out(settings, chain(head, found), workers, output, bodies))
        total = None
    else:
        run_ids = [*head, *found]
        folded = ((ledger, read_to, None if ledger is None else _replayed(ledger, output, bodies))
                  for ledger, read_to in iter_ledgers(app, run_ids, audit=verify))
        total = len(run_ids)
    for ledger, read_to, done in render.tracked_pairs(folded, total, err, "replaying"):
        if done is None:
            if run_id is not None:
                return _no_run(run_id, err)
            continue
        runs += 1
        sha = done["sha256"]
        row: dict[str, Any] = {"run_id": done["run_id"], "sha256": sha, "blocks": done["blocks"],
                               "withheld": done["withheld"]}
        line_text = done.get("line")
        if verify:
            assert ledger is not None
            view = done["view"]
            again = read_fold(app, ledger.run_id, read_to).ledger(ledger.run_id)
            replays_agree = again is not None and view_hash(answer_view(again)) == sha
            if not replays_agree:
                mismatches.append(ledger.run_id)
            problem = _aggregate_problem(app, ledger, view)
            if problem is not None:
                disagreements.append(problem)
            verdict = verify_ledger(ledger)
            failures.extend(verdict.failures)
            for key in totals:
                totals[key] += getattr(verdict, key)
            line = {"run_id": ledger.run_id, "sha256": sha, "view": view if bodies else without_bodies(view),
                    "integrity": verdict.to_json()}
            line_text = _dump(line)
            row.update(replays_agree=replays_agree, aggregate_agrees=problem is None, integrity=verdict.to_json())
        if output == "json":
            print(line_text, file=out)
        else:
            rows.append(row)
            if bodies:
                shown_bodies[done["run_id"]] = done["view"]["blocks"]
    summary: dict[str, Any] | None = None
    if verify:  # never fanned out: every opening has been read
        failures[:0] = [Failure("?", None, None, d.log_position, d.reason, d.detail) for d in orphans]
        verified = not mismatches and not disagreements and not failures
        summary = {
            "verified": verified,
            "runs": runs,
            "replays_agree": not mismatches,
            "mismatched_runs": mismatches,
            "aggregates_agree": not disagreements,
            "aggregate_disagreements": disagreements,
            "integrity_ok": not failures,
            "failures": [f.to_json() for f in failures],
            "failed_runs": sorted({f.run_id for f in failures}),
            **totals,
            "bound": bound if run_id is None else None,
        }
    if output == "json":
        if summary is not None:
            print(_dump({"verify": summary}), file=out)
    else:
        render.replay_table(out, rows, summary, shown_bodies if bodies else None)
    if summary is not None and not summary["verified"]:
        print("imprint: replay verification FAILED: " + "; ".join(
            f"{f.run_id} {f.block_id or '(record)'}: {f.reason}" for f in failures[:10])
            + ("; …" if len(failures) > 10 else "")
            + "".join(f"; {r}: replays differ" for r in mismatches)
            + "".join(f"; {d['run_id']}: {d['why']}" for d in disagreements), file=err)
        return EXIT_MISMATCH
    return EXIT_OK


def _aggregate_problem(app: PublicationLog, ledger: RunLedger, view: Mapping[str, Any]) -> dict[str, Any] | None:
    aggregate = aggregate_blocks(app, ledger)
    if aggregate is None:
        return {"run_id": ledger.run_id, "why": "run aggregate could not be rebuilt"}
    withheld = {w["block_id"] for w in view["withheld"] if w["block_id"] is not None}
    served = {b["block_id"]: b for b in view["blocks"]}
    if set(aggregate) != set(served) | withheld:
        return {"run_id": ledger.run_id, "why": "live blocks differ",
                "log": sorted(set(served) | withheld), "aggregate": sorted(aggregate)}
    differing = sorted(b for b, block in served.items() if aggregate[b] != aggregate_form(block))
    if differing:
        return {"run_id": ledger.run_id, "why": "block revisions differ", "blocks": differing}
    return None


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
            return _no_run(run_id, err)
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
        return _shown(document, output, out, render.recover_table)
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

INSPECT_TYPES = frozenset({"answer.part", "answer.text", "answer.preview", "delivery.sent", "delivery.completed",
                           "delivery.interrupted", "client.received", "client.rendered"})
INSPECT_TOPICS = (Topic.RUNTIME, Topic.PUBLICATION, Topic.DELIVERY)


def observations_of(messages: list[Any]) -> list[Observation]:
    """Kafka messages as timeline observations: ids, positions and times only — never text."""
    seen: list[Observation] = []
    for m in messages:
        at = m.occurred_at.isoformat()
        if m.type in ("answer.part", "answer.text"):
            candidate = intake(m)
            if isinstance(candidate, Candidate):
                seen.append(Observation(m.type, at, candidate_id=candidate.candidate_id))
        elif m.type == "answer.preview":
            seen.append(Observation(m.type, at, candidate_id=m.block.candidate_id, block_id=m.block.block_id,
                                    revision=m.block.revision))
        else:
            seen.append(Observation(m.type, at, last_event_id=m.last_event_id,
                                    block_ids=tuple(getattr(m, "block_ids", ()) or ()),
                                    connection_id=getattr(m, "connection_id", None)))
    return seen


class DeliveredFrames(Protocol):
    """What the inspector reads of Delivery's store: a run's frames after a position, and its
    report of who saw each withdrawn block revision (D7)."""

    def frames_after(self, run_id: str, last_id: int, limit: int = 1000) -> list[Any]: ...

    def seen(self, run_id: str) -> Mapping[str, Any] | None: ...

    def close(self) -> None: ...


def frames_of(store: DeliveredFrames, run_id: str) -> list[SentFrame]:
    """The frames Delivery wrote for the run (ids, events, block revisions; no bodies)."""
    frames: list[SentFrame] = []
    last = 0
    while True:
        page = store.frames_after(run_id, last, limit=1000)
        for f in page:
            data = f.data if isinstance(f.data, dict) else {}
            frames.append(SentFrame(f.id, f.event, data.get("block_id"), data.get("revision"), data.get("status")))
        if len(page) < 1000:
            return frames
        last = page[-1].id


def assemble_timeline(app: PublicationLog, run_id: str, *, store: DeliveredFrames | None, observed: Observations,
                      journal: JournalReader) -> dict[str, Any]:
    """The inspector's document: the log's ledger, Delivery's frames (``store``), Kafka's
    announcements and the journal's facts, put side by side by :func:`imprint.recovery.timeline`."""
    ledger = read_ledger(app, run_id)
    frames: list[SentFrame] | None = None
    seen: Mapping[str, Any] | None = None
    if store is not None:
        frames = frames_of(store, run_id)
        seen = store.seen(run_id)
    return timeline(run_id, ledger, journal=journal.run(run_id), journal_note=journal.reason, frames=frames,
                    observations=observations_of(observed.messages) if observed.available else None,
                    observations_note=observed.reason, seen_report=seen)


async def observe_run(settings: Settings, run_id: str) -> Observations:
    return await observe(settings, run_id, INSPECT_TOPICS, INSPECT_TYPES)


def inspect(settings: Settings, run_id: str, *, open_store: Callable[[], DeliveredFrames],
            out: TextIO | None = None, err: TextIO | None = None, output: Output = "json") -> int:
    """One run's timeline; ``open_store`` opens Delivery's store, read for its frames (the
    composition root hands it over: the operator tools read Delivery's store, never import it)."""
    out, err = out or sys.stdout, err or sys.stderr
    app = open_log(settings)
    store = None
    try:
        if read_ledger(app, run_id) is None:
            return _no_run(run_id, err)
        try:
            store = open_store()
        except Exception as error:  # noqa: BLE001 — the timeline says the frames are unknown
            print(f"imprint: Delivery's store could not be read ({type(error).__name__}); frames unknown", file=err)
        observed = read_observations(settings, run_id, INSPECT_TOPICS, INSPECT_TYPES)
        with JournalReader(settings) as journal:
            document = assemble_timeline(app, run_id, store=store, observed=observed, journal=journal)
        return _shown(document, output, out, render.inspect_table)
    finally:
        if store is not None:
            store.close()
        app.close()


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

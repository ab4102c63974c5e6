"""``imprint replay``: the answer view of every run (R1), folded here or by worker processes,
and with ``--verify`` checked three ways (replays agree, the aggregates agree, every revision
proves itself, R4). :func:`services.recovery.cli.replay` is the command; what it writes is
described there."""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, islice
from typing import Any, TextIO

from imprint.canonical import canonical_json
from imprint.recovery import Defect, Failure, RunLedger, answer_view, hashed_answer_view, verify_ledger, view_hash
from services.common.lifecycle import settle_heap
from services.common.settings import Settings
from services.publication.application import PublicationLog, open_log
from services.recovery import render
from services.recovery.log_reader import (
    RUNS_PER_READ,
    aggregate_blocks,
    aggregate_form,
    current_bound,
    in_pages,
    iter_ledgers,
    opened_runs,
    read_fold,
)
from services.recovery.output import EXIT_MISMATCH, EXIT_OK, Output, dump, no_run


def without_bodies(view: Mapping[str, Any]) -> dict[str, Any]:
    """The view with each block's text replaced by its type and length (the hash is unchanged)."""
    blocks = []
    for block in view["blocks"]:
        content = block.get("content") or {}
        blocks.append({**block, "content": {"type": content.get("type"),
                                            "length": len(content.get("markdown") or "")}})
    return {**view, "blocks": blocks}


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def replayed(ledger: RunLedger, output: Output, bodies: bool) -> dict[str, Any]:
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
        item = replayed(ledger, output, bodies)
        if not (bodies and output != "json"):
            del item["view"]
        done.append(item)
    return done


def fanned_out(settings: Settings, run_ids: Iterable[str], workers: int, output: Output, bodies: bool
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


def replay_log(app: PublicationLog, run_id: str | None, verify: bool, out: TextIO, err: TextIO,
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
        folded = ((None, None, done) for done in fanned_out(settings, chain(head, found), workers, output, bodies))
        total = None
    else:
        run_ids = [*head, *found]
        folded = ((ledger, read_to, None if ledger is None else replayed(ledger, output, bodies))
                  for ledger, read_to in iter_ledgers(app, run_ids, audit=verify))
        total = len(run_ids)
    for ledger, read_to, done in render.tracked_pairs(folded, total, err, "replaying"):
        if done is None:
            if run_id is not None:
                return no_run(run_id, err)
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
            problem = aggregate_problem(app, ledger, view)
            if problem is not None:
                disagreements.append(problem)
            verdict = verify_ledger(ledger)
            failures.extend(verdict.failures)
            for key in totals:
                totals[key] += getattr(verdict, key)
            line = {"run_id": ledger.run_id, "sha256": sha, "view": view if bodies else without_bodies(view),
                    "integrity": verdict.to_json()}
            line_text = dump(line)
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
            print(dump({"verify": summary}), file=out)
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


def aggregate_problem(app: PublicationLog, ledger: RunLedger, view: Mapping[str, Any]) -> dict[str, Any] | None:
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

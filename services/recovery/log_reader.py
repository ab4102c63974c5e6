"""Reads the Publication event log into the pure recovery fold.

Everything is read from the log itself — the notification log (all runs, in
commit order) or one run's stream (in version order) — never from the
repository's snapshots or cache, and never from the runtime journal. A stored
event that cannot be decoded is handed to the fold as a defect of its run, so
one bad record is withheld alone (R4). Each commit is handed over with what the
reader saw of its sealed body (X8: opened, shredded, unopenable).

Streaming: :func:`opened_runs` lists the runs from their opening events (a page of
the notification log at a time, as they are asked for) and :func:`iter_ledgers` reads
the streams of a page of runs (:data:`RUNS_PER_READ`) in one query and folds them one
run at a time, in the order asked for, so a whole-log replay holds one page of runs in
memory, not the log.

Decoding: every read goes through the relay's :class:`BatchOpener` (the application's
own mapper, with one key-table read per page instead of one per body). A page of runs
is decoded one run at a time, each run folded right after its events are decoded; a
run (or a page of the log) that does not decode is decoded again record by record with
the application's mapper, so the record that fails is the only one withheld (R4).

Writes: :func:`apply_reconciliations` appends ``PublicationRun.Reconciled``
facts through the repository (optimistic concurrency, retried on a conflict)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError, StoredEvent

from imprint.contracts.publication import Receipt
from services.common.observability import get_logger
from services.common.event_log import stored
from services.common.recorders import PollRecorder
from imprint.publication import PublicationRun, SourceRecord, SourceStanding, standing_of
from imprint.publication.facts import BlockRecord
from imprint.recovery import Defect, LogFold, Reconciliation, RunLedger, sources_to_confirm
from imprint.recovery.run_ledger import SealStatus
from services.publication.application import RUN_OPENED, PublicationLog
from services.publication.sealing import REMOVED, SEAL_MARK, UNREADABLE, BatchDecoder, BatchOpener

log = get_logger(__name__)
PAGE = 500
RUNS_PER_READ = 50
APPLY_ATTEMPTS = 5


@dataclass(frozen=True)
class Bound:
    """Where a read stops, so two replays read the same log (``--verify``)."""

    notification_id: int | None = None
    """All runs: the last notification id to read (``None``: the log is empty)."""
    version: int | None = None
    """One run: the last stream version to read (``None``: the run has no events)."""


def current_bound(app: PublicationLog, run_id: str | None = None) -> Bound:
    if run_id is None:
        return Bound(notification_id=app.recorder.max_notification_id())  # type: ignore[attr-defined]
    last = app.recorder.select_events(PublicationRun.id_for(run_id), desc=True, limit=1)
    return Bound(version=last[0].originator_version if last else None)


def seal_of(stored: StoredEvent, event: object) -> SealStatus | None:
    """What the mapper made of a commit's sealed body (``None``: not a sealed commit)."""
    if not isinstance(event, PublicationRun.BlockRevisionCommitted):
        return None
    if SEAL_MARK not in stored.state:
        return None
    block = getattr(event, "block", None)
    content = block.get("content") if isinstance(block, dict) else None
    markdown = content.get("markdown") if isinstance(content, dict) else None
    if markdown == REMOVED:
        return "shredded"
    if markdown == UNREADABLE or not isinstance(markdown, str):
        return "unopenable"
    return "opened"


def _opener(app: PublicationLog) -> BatchOpener:
    return BatchOpener(app.mapper, app.keyring)


def _decoded(app: PublicationLog, decode: BatchDecoder, page: Sequence[StoredEvent]
             ) -> list[tuple[StoredEvent, object | None, Exception | None]]:
    """Each stored event with its domain event, or with the error that kept it from decoding."""
    try:
        return [(stored, event, None) for stored, event in zip(page, decode(page), strict=True)]
    except Exception:  # noqa: BLE001 — find the records that fail, one by one
        pass
    decoded: list[tuple[StoredEvent, object | None, Exception | None]] = []
    for stored in page:
        try:
            decoded.append((stored, app.mapper.to_domain_event(stored), None))
        except Exception as error:  # noqa: BLE001 — one undecodable record never stops the read
            decoded.append((stored, None, error))
    return decoded


def _fold_page(app: PublicationLog, opener: BatchOpener, fold: LogFold, page: Sequence[StoredEvent]) -> None:
    decode = opener.for_batch(page)
    _fold_decoded(fold, _decoded(app, decode, page), decode)


def read_fold(app: PublicationLog, run_id: str | None = None, bound: Bound | None = None) -> LogFold:
    """Fold the whole notification log, or one run's stream, up to ``bound`` (default: now)."""
    bound = bound if bound is not None else current_bound(app, run_id)
    if run_id is not None:
        return _read_run(app, run_id, bound.version) if bound.version is not None else LogFold()
    fold = LogFold(owns_events=True)
    if bound.notification_id is None:
        return fold
    opener = _opener(app)
    start = 1
    while start <= bound.notification_id:
        notifications = app.recorder.select_notifications(  # type: ignore[attr-defined]
            start=start, limit=PAGE, stop=bound.notification_id)
        if not notifications:
            break
        _fold_page(app, opener, fold, notifications)
        start = notifications[-1].id + 1
    return fold


def _read_run(app: PublicationLog, run_id: str, lte: int | None, *, audit: bool = True) -> LogFold:
    """One run's stream a page at a time, up to version ``lte`` (``None``: all of it)."""
    fold = LogFold(owns_events=True, audit=audit)
    opener = _opener(app)
    originator_id = PublicationRun.id_for(run_id)
    after: int | None = None
    while True:
        page = app.recorder.select_events(originator_id, gt=after, lte=lte, limit=PAGE)
        _fold_page(app, opener, fold, page)
        if len(page) < PAGE:
            return fold
        after = page[-1].originator_version


@dataclass
class RunIndex:
    """The runs of the log, in the order they were opened, up to a notification id."""

    run_ids: list[str]
    bound: int | None
    orphans: list[Defect]
    """Openings that could not be decoded (their run id is unknown)."""


def run_index(app: PublicationLog) -> RunIndex:
    bound = app.recorder.max_notification_id()  # type: ignore[attr-defined]
    orphans: list[Defect] = []
    return RunIndex(list(opened_runs(app, bound, orphans)), bound, orphans)


def opened_runs(app: PublicationLog, bound: int | None, orphans: list[Defect]) -> Iterator[str]:
    """The ids of the runs opened up to notification ``bound``, in the order they were
    opened, read a page of the log's openings at a time as they are asked for; an opening
    that cannot be decoded is added to ``orphans`` (its run id is unknown)."""
    start = 1
    while bound is not None and start <= bound:
        page = app.recorder.select_notifications(  # type: ignore[attr-defined]
            start=start, limit=PAGE, stop=bound, topics=[RUN_OPENED])
        for notification in page:
            try:
                run_id = app.mapper.to_domain_event(notification).run_id  # type: ignore[attr-defined]
            except Exception as error:  # noqa: BLE001
                orphans.append(Defect(notification.originator_version, "undecodable_event",
                                      f"opening of run {notification.originator_id}: {type(error).__name__}"))
                continue
            yield run_id
        if len(page) < PAGE:
            break
        start = page[-1].id + 1


def iter_ledgers(app: PublicationLog, run_ids: Iterable[str], *, audit: bool = True
                 ) -> Iterable[tuple[RunLedger | None, Bound]]:
    """One run at a time, in the order given: its ledger (``None`` if the run has no
    readable events) and the bound read. The streams of :data:`RUNS_PER_READ` runs are
    read in one query. ``audit=False``: ledgers for answer views only (see :class:`LogFold`)."""
    recorder: PollRecorder = app.recorder  # type: ignore[assignment]
    opener = _opener(app)
    for chunk in in_pages(run_ids, RUNS_PER_READ):
        ids = {run_id: PublicationRun.id_for(run_id) for run_id in chunk}
        streams: dict[uuid.UUID, list[StoredEvent]] = {}
        stream: list[StoredEvent] = []
        for stored in recorder.select_events_of(sorted(set(ids.values()))):
            # each stream's events come together: its id is hashed once, not for every event
            if not stream or stream[-1].originator_id is not stored.originator_id:
                stream = streams.setdefault(stored.originator_id, [])
            stream.append(stored)
        # one key-table read for the page; each run decoded and folded in turn, while its
        # events are still in the processor's caches; what fails is found record by record
        decode = opener.for_batch([s for stream in streams.values() for s in stream])
        for run_id in chunk:
            fold = LogFold(owns_events=True, audit=audit)
            _fold_decoded(fold, _decoded(app, decode, streams.get(ids[run_id], ())), decode)
            yield _bounded(fold.ledger(run_id))


def _fold_decoded(fold: LogFold, decoded: Iterable[tuple[StoredEvent, object | None, Exception | None]],
                  decode: BatchDecoder) -> None:
    """Fold each decoded event with what the reader saw of it: its sealed body, and for a
    commit whose body opened, whether its proof holds (:mod:`imprint.publication.proof`)."""
    for stored, event, error in decoded:
        if error is None:
            # a proof holds only over the body as it was sealed: it opened
            proven = decode.proven(event)
            fold.apply(event, "opened" if proven is not None else seal_of(stored, event), proven)
            continue
        originator_id = stored.originator_id if isinstance(stored.originator_id, uuid.UUID) else None
        log.warning("undecodable event in the Publication log", position=stored.originator_version,
                    error=type(error).__name__)
        if originator_id is not None:
            fold.note_undecodable(originator_id, stored.originator_version, type(error).__name__)


def _bounded(ledger: RunLedger | None) -> tuple[RunLedger | None, Bound]:
    return ledger, Bound(version=ledger.version if ledger is not None else None)


def in_pages(items: Iterable[str], size: int) -> Iterator[list[str]]:
    """``items`` in lists of ``size`` (the last one shorter), read as each list is asked for."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def read_ledger(app: PublicationLog, run_id: str) -> RunLedger | None:
    return read_fold(app, run_id).ledger(run_id)


def source_standing(app: PublicationLog, source_ids: Iterable[str]) -> SourceStanding:
    """Current standing of the given sources, through their ``SourceRecord`` aggregates."""
    records: list[SourceRecord] = []
    for source_id in sorted(set(source_ids)):
        try:
            records.append(stored(app, SourceRecord.id_for(source_id)))
        except AggregateNotFoundError:
            continue
    return standing_of(records)


def standing_for_block(app: PublicationLog, ledger: RunLedger, block_id: str) -> SourceStanding:
    return source_standing(app, sources_to_confirm(ledger, block_id))


AGGREGATE_FIELDS = ("block_id", "revision", "delivery_ordinal", "candidate_id", "body_sha256", "source_hint",
                    "effective_sources", "depends_on", "receipt")
"""What a run aggregate keeps of each live block (its body and view stay in the commit
event), so what ``--verify`` compares between the aggregate and the fold."""


def aggregate_blocks(app: PublicationLog, ledger: RunLedger) -> dict[str, dict[str, Any]] | None:
    """The live blocks of the run's aggregate *as the repository rebuilds it* (snapshots
    included) at the version the fold read, as :data:`AGGREGATE_FIELDS`, for ``--verify``.
    ``None`` if unreadable."""
    if ledger.originator_id is None:
        return None
    try:
        run: PublicationRun = app.repository.get(ledger.originator_id, version=ledger.version)
    except Exception as error:  # noqa: BLE001 — reported as a verification failure
        log.warning("run aggregate could not be rebuilt", run_id=ledger.run_id, error=type(error).__name__)
        return None
    return {record.block_id: _kept(record) for record in run.live_blocks()}


def _kept(record: BlockRecord) -> dict[str, Any]:
    """One live block as :data:`AGGREGATE_FIELDS` (``{"unreadable": True}``: its stored
    receipt does not read, reported as a differing block)."""
    try:
        receipt = Receipt.model_validate(record.receipt).model_dump(mode="json") if record.receipt else None
    except Exception:  # noqa: BLE001
        return {"unreadable": True}
    return {
        "block_id": record.block_id, "revision": record.revision, "delivery_ordinal": record.ordinal,
        "candidate_id": record.candidate_id, "body_sha256": record.body_sha256, "source_hint": record.source_hint,
        "effective_sources": None if record.effective_sources is None else list(record.effective_sources),
        "depends_on": list(record.depends_on), "receipt": receipt,
    }


def aggregate_form(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block the fold serves, as its run aggregate keeps it (:data:`AGGREGATE_FIELDS`)."""
    return {name: block.get(name) for name in AGGREGATE_FIELDS}


def apply_reconciliations(app: PublicationLog, run_id: str, findings: list[Reconciliation]) -> list[dict[str, Any]]:
    """Append each finding as a ``Reconciled`` fact on the run (idempotent). Never
    settles a candidate, changes a block or re-runs anything."""
    if not findings:
        return []
    for attempt in range(APPLY_ATTEMPTS):
        try:
            run: PublicationRun = stored(app, PublicationRun.id_for(run_id))
        except AggregateNotFoundError:
            return [_applied(f, False, "run not found") for f in findings]
        except Exception as error:  # noqa: BLE001 — e.g. an undecodable record: report, append nothing
            log.warning("run aggregate could not be rebuilt; nothing appended", run_id=run_id,
                        error=type(error).__name__)
            return [_applied(f, False, f"run aggregate could not be rebuilt: {type(error).__name__}")
                    for f in findings]
        appended = [run.reconcile(f.kind, f.candidate_id, f.block_id, f.revision, f.detail) for f in findings]
        try:
            app.save(run)
        except IntegrityError:
            log.info("run changed while reconciling; reading it again", run_id=run_id, attempt=attempt + 1)
            continue
        log.info("reconciliation facts appended", run_id=run_id, count=sum(appended))
        return [_applied(f, added, None) for f, added in zip(findings, appended)]
    raise RuntimeError(f"could not append reconciliation facts to {run_id}: the run kept changing")


def _applied(finding: Reconciliation, appended: bool, error: str | None) -> dict[str, Any]:
    return {"run_id": finding.run_id, "kind": finding.kind, "candidate_id": finding.candidate_id,
            "block_id": finding.block_id, "revision": finding.revision, "detail": finding.detail,
            "appended": appended, "error": error}

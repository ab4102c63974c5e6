"""Delivery's view tables as the sink of the tracked unit of work.

One poll is one transaction (:mod:`services.common.unit_of_work`): the partitions'
positions are locked and read, the pure projection (:mod:`imprint.delivery.projection`)
appends frames through a :class:`ViewWorkspace`, and every changed row is written with
the positions. A redelivered message (its offset is already tracked) changes nothing and
appends no frame; a restart loses neither views nor resume positions.

**Append, never rewrite.** A poll costs what it touches, not the run's history: the run
row (identity, lifecycle, the live frame of its run-level keys), the rows of the blocks
its messages name, new frame rows, and one ``UPDATE`` per superseded frame (its body
becomes a skeleton: :func:`imprint.delivery.frames.skeleton`). Each table a poll writes
gets one multi-row statement. Only the terminal (once per run), a withdrawal after
``done`` and a conversation's deletion read a run's frames.

**Hot runs.** The runs a poll touched stay in memory with the rows they loaded, keyed by
the run row's ``version``, which every write of the run's rows increments under the row
lock. The next poll still locks and reads the run row; when its version is the cached
one, no other row is read. A kept block is its row's text as stored, not its parsed
state (unless its preview still awaits the commit the next poll most likely brings): a
poll parses only the blocks its messages name, and thousands of runs in flight cost a
few kilobytes per block rather than the parsed models' many objects.
Another instance's write, a purge or a failed transaction makes the copy stale or drops
it, and the run is read again. A run that ended or was deleted is not kept; the rest
are bounded by :data:`HOT_BLOCKS`.

**Several instances.** The instances form one consumer group over one shared store.
During a rebalance the old and the new owner of a partition may apply overlapping polls
at the same moment: a transaction-scoped lock per partition, taken before the position
is read, makes the second wait and then skip what the first committed. The poll's
transaction announces the runs it changed on the tables' channel (where the backend
has one), so every instance wakes its live feeds."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import Tracking
from opentelemetry.trace import Tracer
from pydantic_core import to_json

from imprint.delivery import merge, projection
from imprint.delivery.frames import FrameDraft, RunProjection, skeleton
from imprint.delivery.notices import Notice
from imprint.runtime import tracecontext
from services.common import tracing
from services.common.inbound import Inbound
from services.common.observability import get_logger
from services.delivery.view_tables import (
    BLOCK_COLUMNS,
    CONFLICT_COLUMNS,
    FRAME_COLUMNS,
    NOTICE_COLUMNS,
    RUN_COLUMNS,
    TRACED_FRAME_COLUMNS,
    ViewTables,
    notice_feed,
)

log = get_logger(__name__)

HOT_BLOCKS = 20_000
"""At most this many block states are kept in memory across the hot runs (least recently
used runs go first): enough for thousands of runs in flight with a few blocks each (a run
evicted between two polls is read and parsed again at the next), bounded because a large
heap makes every garbage collection of the process slower."""
PRIVATE_FRAME_EVENTS = ("answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
                        "content", "evidence-summary", "progress", "error")
NOTIFY_PAYLOAD_BYTES = 7000
"""PostgreSQL caps a notification's payload at 8000 bytes; run ids are packed below that."""

ConflictListener = Callable[[merge.Conflict], None]


def now() -> str:
    return datetime.now(UTC).isoformat()


def as_json(value: Any) -> str:
    """``value`` as compact JSON text (UTF-8, nothing escaped), the way every frame and
    live-frame skeleton is stored (pydantic-core's encoder)."""
    return to_json(value).decode()


def notify_payloads(origin: str, run_ids: Sequence[str]) -> list[str]:
    """``{"origin": …, "runs": [...]}`` payloads, each under PostgreSQL's size cap."""
    payloads: list[str] = []
    chunk: list[str] = []
    size = 0
    for run_id in run_ids:
        cost = len(json.dumps(run_id)) + 1
        if chunk and size + cost > NOTIFY_PAYLOAD_BYTES:
            payloads.append(json.dumps({"origin": origin, "runs": chunk}))
            chunk, size = [], 0
        chunk.append(run_id)
        size += cost
    if chunk:
        payloads.append(json.dumps({"origin": origin, "runs": chunk}))
    return payloads


# ---------------------------------------------------------------------- rows held by a poll


@dataclass
class _Block:
    """A block row as loaded: its state (as stored, to see whether it changed) and its live frame."""

    stored: str | None
    frame_id: int | None
    frame_skeleton: str | None

    def __post_init__(self) -> None:
        self.stored_frame_id = self.frame_id

    def changed(self, state: str) -> bool:
        return state != self.stored or self.frame_id != self.stored_frame_id


@dataclass
class _Run:
    projection: RunProjection
    last_frame_id: int
    conflict_count: int
    live: dict[str, list[Any]]
    """Run-level keys (``run-status``, ``progress``) → [live frame id, its skeleton]."""
    version: int
    """The run row's version these rows were read at (or written as)."""
    rows: dict[str, _Block] = field(default_factory=dict)
    """Loaded block rows (a name loaded and absent has ``stored`` None)."""
    all_blocks: bool = False
    """Every block row of the run is in ``rows`` (a name not there is a new block)."""
    dirty: bool = False
    touched: set[str] | None = field(default_factory=set)
    """The blocks this poll's messages named (``None``: all of them): only these are written."""


class HotRuns:
    """The runs committed polls left in memory, least recently used first. A poll takes a
    run out (the copy is then its own to change) and gives it back after its commit; a
    run that was not given back (a failed transaction) is read again."""

    def __init__(self, max_blocks: int = HOT_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._blocks = 0

    def take(self, run_id: str, version: int) -> _Run | None:
        """The cached run if it is the stored version (``None`` otherwise; a stale copy is dropped)."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return None
        self._blocks -= len(run.rows)
        return run if run.version == version else None

    def drop(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._blocks -= len(run.rows)

    def keep(self, runs: Iterable[_Run]) -> None:
        for run in runs:
            self.drop(run.projection.run_id)
            if run.projection.terminal or run.projection.deleted:
                continue  # done: at most a late withdrawal follows, which reads the run again
            # A block whose preview still awaits its commit stays parsed: the next poll
            # most likely names it. Any other block is kept as its row as stored, and the
            # poll that names it parses it again.
            held = run.projection.answer.blocks
            for name, row in run.rows.items():
                state = held.get(name)
                if row.stored is not None and state is not None and state.preview is None:
                    del held[name]
            self._runs[run.projection.run_id] = run
            self._blocks += len(run.rows)
        while self._blocks > self.max_blocks and self._runs:
            _, oldest = self._runs.popitem(last=False)
            self._blocks -= len(oldest.rows)

    def __len__(self) -> int:
        return len(self._runs)


# ---------------------------------------------------------------------- one poll's workspace


class ViewWorkspace:
    """The rows one poll reads and writes, collected so each is written once
    (:class:`imprint.delivery.projection.ViewWorkspace`)."""

    frame_columns = FRAME_COLUMNS

    def __init__(self, views: ViewTables, hot: HotRuns, c: Any) -> None:
        self.views = views
        self.hot = hot
        self.c = c
        self.runs: dict[str, _Run] = {}
        self.touched: dict[str, None] = {}
        """Live feeds that changed: runs (new frames, a terminal, a purge) and conversations
        (new notices, a deletion: :func:`notice_feed`)."""
        self.notices: list[tuple[str, Notice]] = []
        """D7: (account, notice) to number and write with the poll."""
        self.conflicts: list[merge.Conflict] = []
        self.inserts: list[list[Any]] = []
        """Pending frame rows, in :data:`FRAME_COLUMNS` order."""
        self.pending: dict[tuple[str, str], int] = {}
        """(run_id, key) → index in ``inserts`` of the key's newest pending frame."""
        self.strips: list[tuple[str, str, int]] = []
        self.conflict_rows: list[tuple[Any, ...]] = []
        self.now = now()
        """The time of every row this poll writes (one transaction: one moment)."""

    # -------------------------------------------------------------- loading

    def load(self, named: dict[str, set[str] | None]) -> None:
        self._load(list(named))
        for run_id in sorted(named):
            self.blocks(self.runs[run_id], None if named[run_id] is None else tuple(named[run_id] or ()))

    def run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            self._load([run_id])
            run = self.runs[run_id]
        return run

    def _load(self, run_ids: Sequence[str]) -> None:
        """Lock and read these runs' rows in one statement, in run id order, then create the
        missing ones in that order (so two instances sharing runs cannot deadlock). A run
        held in memory at the stored version is taken as it is; only the others are parsed."""
        v, c = self.views, self.c
        wanted = sorted(run_id for run_id in set(run_ids) if run_id not in self.runs)
        columns = "run_id, projection, last_frame_id, live_frames, conflict_count, version"
        found = v.run_rows(c, wanted, columns, lock=True)
        for run_id in wanted:
            row = found.get(run_id)
            if row is None:
                fresh = RunProjection.new(run_id)
                c.execute(v.q("INSERT INTO {runs} (run_id, projection, first_seen, updated_at) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (run_id) DO NOTHING RETURNING run_id"),
                          (run_id, fresh.model_dump_json(exclude={"answer"}), self.now, self.now))
                if c.fetchone() is not None:  # ours, and locked until this poll commits: it has no blocks yet
                    self.runs[run_id] = _Run(fresh, 0, 0, {}, 0, all_blocks=True)
                    continue
                row = v.run_rows(c, [run_id], columns, lock=True)[run_id]
            hot = self.hot.take(run_id, int(row["version"]))
            if hot is not None:
                self.runs[run_id] = hot
                continue
            data = json.loads(row["projection"])
            projection = RunProjection.model_validate({**data, "answer": merge.AnswerState(run_id=run_id)})
            self.runs[run_id] = _Run(projection, int(row["last_frame_id"]), int(row["conflict_count"]),
                                     json.loads(row["live_frames"] or "{}"), int(row["version"]))

    def blocks(self, run: _Run, names: tuple[str, ...] | None) -> None:
        if names is None:
            run.touched = None
        elif run.touched is not None:
            run.touched.update(names)
        if not run.all_blocks:
            self._read_rows(run, names)
        held, rows = run.projection.answer.blocks, run.rows
        for name in rows if names is None else names:
            row = rows.get(name)
            if row is not None and row.stored is not None and name not in held:
                held[name] = merge.BlockState.model_validate_json(row.stored)

    def _read_rows(self, run: _Run, names: tuple[str, ...] | None) -> None:
        v, c, run_id = self.views, self.c, run.projection.run_id
        if names is None:
            c.execute(v.q("SELECT block_id, state, frame_id, frame_skeleton FROM {blocks} WHERE run_id = ?"), (run_id,))
            run.all_blocks = True
            self._adopt(run, c.fetchall())
            return
        missing = sorted(n for n in names if n not in run.rows)
        for start in range(0, len(missing), 400):
            part = missing[start:start + 400]
            marks = ", ".join("?" for _ in part)
            c.execute(v.q(f"SELECT block_id, state, frame_id, frame_skeleton FROM {{blocks}} "
                          f"WHERE run_id = ? AND block_id IN ({marks})"), (run_id, *part))
            self._adopt(run, c.fetchall())
            for name in part:
                run.rows.setdefault(name, _Block(None, None, None))

    @staticmethod
    def _adopt(run: _Run, rows: list[Any]) -> None:
        """Take the rows read for ``run`` (a row already held is newer than the table's)."""
        for row in rows:
            if row["block_id"] not in run.rows:
                run.rows[row["block_id"]] = _Block(row["state"], row["frame_id"], row["frame_skeleton"])

    # -------------------------------------------------------------- frames

    def append(self, run: _Run, drafts: Sequence[FrameDraft], conflicts: Sequence[merge.Conflict]) -> list[int]:
        run_id = run.projection.run_id
        run.dirty = True
        ids: list[int] = []
        error_frames: dict[tuple[str, int], int] = {}
        for draft in drafts:
            frame_id = self._frame(run, draft)
            ids.append(frame_id)
            if draft.event == "error":
                error_frames[(draft.data["block_id"], draft.data["revision"])] = frame_id
        for conflict in conflicts:
            run.conflict_count += 1
            self.conflict_rows.append((
                run_id, run.conflict_count, conflict.block_id, conflict.revision, conflict.first_kind,
                conflict.first_sha256, conflict.second_kind, conflict.second_sha256,
                error_frames.get((conflict.block_id, conflict.revision)), self.now))
            self.conflicts.append(conflict)
        if drafts:
            self.touched[run_id] = None
        return ids

    def _frame(self, run: _Run, draft: FrameDraft) -> int:
        run_id = run.projection.run_id
        run.last_frame_id += 1
        frame_id = run.last_frame_id
        data = as_json(draft.data)
        if draft.key is not None:
            pending = self.pending.get((run_id, draft.key))
            if pending is not None:  # superseded within this poll: written as a skeleton
                row = self.inserts[pending]
                row[3] = as_json(skeleton(row[2], json.loads(row[3]), row[4]))
                row[6] = 1
            else:
                live = self._live(run, draft.key)
                if live is not None and live[0] is not None:
                    self.strips.append((live[1], run_id, int(live[0])))
            self.pending[(run_id, draft.key)] = len(self.inserts)
            self._set_live(run, draft.key, frame_id, as_json(skeleton(draft.event, draft.data, draft.body_sha256)))
        self.inserts.append([run_id, frame_id, draft.event, data, draft.body_sha256, draft.key, 0, self.now])
        return frame_id

    def _live(self, run: _Run, key: str) -> tuple[int | None, str | None] | None:
        if key.startswith("block:"):
            block_id = key.removeprefix("block:")
            if block_id not in run.rows and run.all_blocks:  # a block new in this poll
                run.rows[block_id] = _Block(None, None, None)
            row = run.rows.get(block_id)
            if row is None:  # never happens: a block frame names a block its message named
                raise AssertionError(f"block frame {key} of {run.projection.run_id} without its block row")
            return row.frame_id, row.frame_skeleton
        live = run.live.get(key)
        return (int(live[0]), live[1]) if live else None

    def _set_live(self, run: _Run, key: str, frame_id: int, frame_skeleton: str) -> None:
        if key.startswith("block:"):
            row = run.rows[key.removeprefix("block:")]
            row.frame_id, row.frame_skeleton = frame_id, frame_skeleton
        else:
            run.live[key] = [frame_id, frame_skeleton]
        run.dirty = True

    def frame_hashes(self, run: _Run) -> list[tuple[int, str, str]]:
        self.flush_frames()
        self.c.execute(self.views.q("SELECT frame_id, event, body_sha256 FROM {frames} WHERE run_id = ? "
                                    "ORDER BY frame_id"), (run.projection.run_id,))
        return [(int(row["frame_id"]), row["event"], row["body_sha256"]) for row in self.c.fetchall()]

    def mark_terminal(self, run: _Run) -> None:
        self.flush_frames()
        self.c.execute(self.views.q("UPDATE {runs} SET terminal_frame_id = ? WHERE run_id = ?"),
                       (run.last_frame_id, run.projection.run_id))
        self.touched[run.projection.run_id] = None

    def strip(self, run: _Run, key: str, reason: str) -> None:
        self.flush_frames()
        strip_key(self.views, self.c, run.projection.run_id, key, reason)

    def notice(self, run: _Run, notice: Notice) -> None:
        account = run.projection.account_id
        if account is not None:  # a run with a conversation always has its account
            self.notices.append((account, notice))
            # Named now: the policy hands the touched feeds to the consumer before the flush.
            self.touched[notice_feed(notice.conversation_id)] = None

    def purge(self, conversation_id: str, account_id: str | None) -> None:
        # The poll's notices wait for its end: a conversation row is locked only after every
        # run row the poll locks (the purge locks more of them).
        self.flush(notices=False)
        self.runs.clear()  # the purge rewrites runs behind what this poll loaded
        purged = purge(self.views, self.c, conversation_id, account_id)
        for run_id in purged:
            self.touched[run_id] = None
            self.hot.drop(run_id)
        if purged:
            self.touched[notice_feed(conversation_id)] = None

    # -------------------------------------------------------------- writing

    def flush_frames(self) -> None:
        v, c = self.views, self.c
        if self.strips:
            v.strip_frames(c, self.strips)
            self.strips = []
        if self.inserts:
            v.insert_rows(c, "{frames}", self.frame_columns, self.inserts)
            self.inserts = []
            self.pending = {}

    def flush_notices(self) -> None:
        """D7: number this poll's notices per conversation (one statement for all of them,
        under each conversation row's lock, taken after every run row the poll locked, so
        two instances sharing a conversation never wait on each other in a cycle) and write
        them as they will be sent."""
        if not self.notices:
            return
        pending, self.notices = self.notices, []
        counts: dict[str, tuple[str, int]] = {}
        for account, notice in pending:
            _, n = counts.get(notice.conversation_id, (account, 0))
            counts[notice.conversation_id] = (account, n + 1)
        last = self.views.number_notices(self.c, counts, self.now)
        next_id = {conversation: last[conversation] - n + 1 for conversation, (_, n) in counts.items()
                   if conversation in last}
        rows: list[tuple[Any, ...]] = []
        for _, notice in pending:
            conversation = notice.conversation_id
            if conversation not in next_id:
                log.warning("notice not given: the conversation is another account's or deleted",
                            run_id=notice.run_id, block_id=notice.block_id)
                continue
            notice_id = next_id[conversation]
            next_id[conversation] += 1
            rows.append((conversation, notice_id, notice.run_id, notice.block_id, notice.revision, notice.cause,
                         as_json(notice.payload(notice_id, self.now)), self.now))
        if rows:
            self.views.insert_rows(self.c, "{notices}", NOTICE_COLUMNS, rows)

    def flush(self, *, notices: bool = True) -> None:
        """Write every pending frame, notice and every changed run and block row."""
        v, c, stamp = self.views, self.c, self.now
        self.flush_frames()
        if notices:
            self.flush_notices()
        if self.conflict_rows:
            v.insert_rows(c, "{conflicts}", CONFLICT_COLUMNS, self.conflict_rows)
            self.conflict_rows = []
        block_rows: list[tuple[Any, ...]] = []
        run_rows: list[tuple[Any, ...]] = []
        for run in self.runs.values():
            if not run.dirty:
                continue
            p = run.projection
            blocks = p.answer.blocks
            names = blocks if run.touched is None else sorted(n for n in run.touched if n in blocks)
            for block_id in names:
                state = blocks[block_id]
                row = run.rows.setdefault(block_id, _Block(None, None, None))
                stored = state.model_dump_json()
                if not row.changed(stored):
                    continue
                block_rows.append((p.run_id, block_id, stored, row.frame_id, row.frame_skeleton, stamp))
                row.stored, row.stored_frame_id = stored, row.frame_id
            run_rows.append((p.account_id, p.conversation_id, p.state, p.outcome, run.last_frame_id, int(p.deleted),
                             p.model_dump_json(exclude={"answer"}), as_json(run.live), run.conflict_count, stamp,
                             p.run_id))
            run.version += 1
            run.dirty = False
            run.touched = set()
        if block_rows:
            v.insert_rows(c, "{blocks}", BLOCK_COLUMNS, block_rows, " ON CONFLICT (run_id, block_id) DO UPDATE SET "
                          "state = excluded.state, frame_id = excluded.frame_id, "
                          "frame_skeleton = excluded.frame_skeleton, updated_at = excluded.updated_at")
        if run_rows:
            v.update_rows(c, "{runs}", RUN_COLUMNS, run_rows, ("run_id",), "version = version + 1")


class TracedWorkspace(ViewWorkspace):
    """A traced poll's workspace: each frame row keeps the ``traceparent`` of the span of the
    message that appended it (``trace``, set by :class:`Projecting` around each message)."""

    frame_columns = TRACED_FRAME_COLUMNS
    trace: str | None = None

    def _frame(self, run: _Run, draft: FrameDraft) -> int:
        frame_id = super()._frame(run, draft)
        self.inserts[-1].append(self.trace)  # the row just appended
        return frame_id


def strip_key(views: ViewTables, c: Any, run_id: str, key: str, reason: str) -> None:
    """Replace the bodies of every frame of a key with skeletons (ids and hashes stay)."""
    c.execute(views.q("SELECT frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? AND skey = ?"),
              (run_id, key))
    updates = [(as_json(skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason=reason)),
                run_id, row["frame_id"]) for row in c.fetchall()]
    if updates:
        views.strip_frames(c, updates)


def purge(views: ViewTables, c: Any, conversation_id: str, account_id: str | None) -> list[str]:
    """X8: drop every private body of the conversation's runs (frames' markdown and text,
    answer text, block states). Returns the purged run ids."""
    run_ids = views.conversation_runs(c, conversation_id, account_id)
    marks = ", ".join("?" for _ in PRIVATE_FRAME_EVENTS)
    for run_id in run_ids:
        ws = ViewWorkspace(views, HotRuns(0), c)
        run = ws.run(run_id)
        p = run.projection
        p.deleted = True
        p.answer_text = None
        p.evidence = []
        run.dirty = True
        ws.flush()
        c.execute(views.q("DELETE FROM {blocks} WHERE run_id = ?"), (run_id,))
        c.execute(views.q(f"SELECT frame_id, event, data, body_sha256 FROM {{frames}} WHERE run_id = ? "
                          f"AND event IN ({marks})"), (run_id, *PRIVATE_FRAME_EVENTS))
        updates = [(as_json(skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason="purged")),
                    run_id, row["frame_id"]) for row in c.fetchall()]
        if updates:
            views.strip_frames(c, updates)
    if run_ids:
        views.close_conversation(c, conversation_id, account_id, now())
        log.info("conversation purged", conversation_id=conversation_id, runs=len(run_ids))
    return run_ids


# ---------------------------------------------------------------------- the sink


@dataclass
class ViewUnit:
    """One poll's unit on the view tables: the positions read under their locks and the workspace."""

    positions: dict[str, int]
    workspace: ViewWorkspace
    sink: ViewSink

    def record(self, trackings: Sequence[Tracking]) -> None:
        ws, tables = self.workspace, self.sink.views.tables
        ws.flush()
        tables.record_positions(ws.c, trackings)
        if ws.touched:
            for payload in notify_payloads(self.sink.origin, list(ws.touched)):
                tables.notify(ws.c, payload)


class ViewSink:
    """The view tables as the sink of Delivery's tracked unit of work."""

    def __init__(self, views: ViewTables, origin: str, *, traced: bool = False) -> None:
        self.views = views
        self.origin = origin
        """Names this process in its notifications (its own consumer wakes its feeds)."""
        self.workspace = TracedWorkspace if traced else ViewWorkspace
        self.hot = HotRuns()
        self.listeners: list[ConflictListener] = []

    @contextmanager
    def unit(self, names: Sequence[str]) -> Iterator[ViewUnit]:
        tables = self.views.tables
        with tables.writing() as c:
            tables.lock(c, names)
            recorded = tables.read_positions(c, names)
            unit = ViewUnit({name: -1 if position is None else position for name, position in recorded.items()},
                            self.workspace(self.views, self.hot, c), self)
            yield unit
        ws = unit.workspace
        self.hot.keep(ws.runs.values())  # committed: these copies are the stored rows now
        for conflict in ws.conflicts:
            log.warning("protocol conflict", run_id=conflict.run_id, block_id=conflict.block_id,
                        revision=conflict.revision, first=conflict.first_kind, second=conflict.second_kind)
            for listener in self.listeners:
                listener(conflict)

    def recorded(self, tracking: Tracking) -> bool:
        position = self.views.tables.max_position(tracking.application_name)
        return position is not None and position >= tracking.notification_id


class Projecting:
    """Delivery's policy over a poll: :func:`imprint.delivery.projection.project`; the
    result is the runs whose streams changed (their feeds are woken after the commit).

    With a tracer (and a :class:`TracedWorkspace`), each message is applied in a ``delivery
    apply`` span under the context its record carried, with its ids and the first frame id it
    was given; the frames keep the span's ``traceparent``, so whichever instance sends them
    continues the trace (X9: ids only)."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.tracer = tracer

    def apply(self, ws: ViewWorkspace, fresh: Sequence[Inbound]) -> list[str]:
        if self.tracer is None:
            projection.project(ws, [item.message for item in fresh])
        else:
            assert isinstance(ws, TracedWorkspace), "a traced poll keeps its frames' traceparent"
            self._traced(self.tracer, ws, fresh)
        return list(ws.touched)

    def _traced(self, tracer: Tracer, ws: TracedWorkspace, fresh: Sequence[Inbound]) -> None:
        inbound = {id(item.message): item for item in fresh}
        for message in projection.hold(ws, [item.message for item in fresh]):
            with tracing.handling(tracer, "delivery apply", inbound[id(message)],
                                  **message.trace_ids()) as span:
                ws.trace = tracecontext.traceparent()
                appended = projection.apply(ws, message)
                if appended:
                    span.set_attributes(tracecontext.id_attributes({"frame_id": appended[0]}))
            ws.trace = None

    def shown(self, touched: list[str]) -> bool:
        return False  # nothing leaves Delivery before its commit

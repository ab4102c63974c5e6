"""One Delivery poll's rows, read and written through the view tables: the
:class:`imprint.delivery.projection.ViewWorkspace` of its unit of work. What the poll holds
and appends is the pure :class:`imprint.delivery.rows.PollRows`; this is its store: it reads
what ``prepare`` declared in one go (:meth:`ViewWorkspace.load_wanted`), a run or block not
declared on a miss (:meth:`ViewWorkspace.fetch`), and writes everything at the poll's end.

**Append, never rewrite.** A poll costs what it touches, not the run's history: the run
row (identity, lifecycle, the live frame of its run-level keys), the rows of the blocks
its messages name, new frame rows, and one ``UPDATE`` per superseded frame (its body
becomes a skeleton: :func:`imprint.delivery.frames.skeleton`). Each table a poll writes
gets one multi-row statement. Only the terminal (once per run), a withdrawal after
``done`` and a conversation's deletion read a run's frames."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic_core import to_json

from imprint.delivery import merge
from imprint.delivery.conversation import NOTICE_EVENT
from imprint.delivery.feeds import conversation_feed, notice_feed
from imprint.delivery.frame import as_json, skeleton_text
from imprint.delivery.frames import RunProjection
from imprint.delivery.rows import BlockRow, PollRows, RunRows
from services.common.observability import get_logger
from services.delivery.hot_runs import HotRuns
from services.delivery.view_tables import (
    BLOCK_COLUMNS,
    CONFLICT_COLUMNS,
    ENTRY_COLUMNS,
    FRAME_COLUMNS,
    NOTICE_COLUMNS,
    RUN_COLUMNS,
    TRACED_FRAME_COLUMNS,
    ViewTables,
)

log = get_logger(__name__)

PRIVATE_FRAME_EVENTS = ("answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
                        "content", "evidence-summary", "progress", "error")


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(eq=False, kw_only=True)
class ViewWorkspace(PollRows):
    """The rows one poll reads and writes (:class:`imprint.delivery.rows.PollRows`), read from
    and written to the view tables (:class:`imprint.delivery.projection.ViewWorkspace`)."""

    frame_columns: ClassVar[tuple[str, ...]] = FRAME_COLUMNS

    views: ViewTables
    hot: HotRuns
    c: Any
    """The poll's connection (its transaction)."""

    @classmethod
    def of(cls, views: ViewTables, hot: HotRuns, c: Any) -> ViewWorkspace:
        """The workspace of a poll starting now."""
        return cls(now(), views=views, hot=hot, c=c)

    # -------------------------------------------------------------- loading

    def load_wanted(self) -> None:
        """Read every run the poll's messages named (locked, in one order) with the rows of the
        blocks they name, before the first message is handled."""
        wanted, self.wanted = self.wanted, {}
        self._load(list(wanted))
        for run_id in sorted(wanted):
            run, names = self.runs[run_id], wanted[run_id]
            if not run.all_blocks:
                self._read_rows(run, None if names is None else tuple(names))

    def fetch(self, run_id: str, blocks: tuple[str, ...] | None) -> None:
        if run_id not in self.runs:
            self._load([run_id])
        run = self.runs[run_id]
        if not run.all_blocks:
            self._read_rows(run, blocks)

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
                fresh = RunProjection(run_id=run_id, answer=merge.AnswerState(run_id=run_id))
                c.execute(v.q("INSERT INTO {runs} (run_id, projection, first_seen, updated_at) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (run_id) DO NOTHING RETURNING run_id"),
                          (run_id, fresh.model_dump_json(exclude={"answer"}), self.now, self.now))
                if c.fetchone() is not None:  # ours, and locked until this poll commits: it has no blocks yet
                    self.runs[run_id] = RunRows(fresh, 0, 0, {}, 0, all_blocks=True)
                    continue
                row = v.run_rows(c, [run_id], columns, lock=True)[run_id]
            hot = self.hot.take(run_id, int(row["version"]))
            if hot is not None:
                self.runs[run_id] = hot
                continue
            data = json.loads(row["projection"])
            projection = RunProjection.model_validate({**data, "answer": merge.AnswerState(run_id=run_id)})
            self.runs[run_id] = RunRows(projection, int(row["last_frame_id"]), int(row["conflict_count"]),
                                        json.loads(row["live_frames"] or "{}"), int(row["version"]))

    def _read_rows(self, run: RunRows, names: tuple[str, ...] | None) -> None:
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
                if name not in run.rows:
                    run.rows[name] = BlockRow(None, None, None)

    @staticmethod
    def _adopt(run: RunRows, rows: list[Any]) -> None:
        """Take the rows read for ``run`` (a row already held is newer than the table's)."""
        for row in rows:
            if row["block_id"] not in run.rows:
                run.rows[row["block_id"]] = BlockRow(row["state"], row["frame_id"], row["frame_skeleton"],
                                                     stored_frame_id=row["frame_id"])

    # -------------------------------------------------------------- frames read and rewritten

    def frame_hashes(self, run: RunRows) -> list[tuple[int, str, str]]:
        self.flush_frames()
        self.c.execute(self.views.q("SELECT frame_id, event, body_sha256 FROM {frames} WHERE run_id = ? "
                                    "ORDER BY frame_id"), (run.projection.run_id,))
        return [(int(row["frame_id"]), row["event"], row["body_sha256"]) for row in self.c.fetchall()]

    def mark_terminal(self, run: RunRows) -> None:
        self.flush_frames()
        self.c.execute(self.views.q("UPDATE {runs} SET terminal_frame_id = ? WHERE run_id = ?"),
                       (run.last_frame_id, run.projection.run_id))
        self.touched[run.projection.run_id] = None

    def strip(self, run: RunRows, key: str, reason: str) -> None:
        self.flush_frames()
        strip_key(self.views, self.c, run.projection.run_id, key, reason)
        self.rewritten.add(run.projection.run_id)

    def purge(self, conversation_id: str, account_id: str | None) -> None:
        # The poll's notices wait for its end: a conversation row is locked only after every
        # run row the poll locks (the purge locks more of them).
        self.flush(notices=False)
        self.runs.clear()  # the purge rewrites runs behind what this poll loaded
        purged = purge(self.views, self.c, conversation_id, account_id)
        for run_id in purged:
            self.touched[run_id] = None
            self.rewritten.add(run_id)
            self.hot.drop(run_id)
        if purged:
            self.touched[notice_feed(conversation_id)] = None
            self.touched[conversation_feed(conversation_id)] = None

    # -------------------------------------------------------------- writing

    def flush_frames(self, writes: Any = None) -> None:
        """Write the pending strips and frames (on ``writes``: held with the poll's last
        writes, :meth:`services.common.tables.Tables.together`; the strips touch earlier
        frames only, as they would written before the new ones)."""
        v, c = self.views, self.c if writes is None else writes
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
        them as they will be sent; then D9: the poll's entries of each conversation stream —
        its turns and a copy of each notice — numbered and written the same way."""
        pending, self.notices = self.notices, []
        ids = self._number([(account, notice.conversation_id) for account, notice in pending], "last_notice_id")
        rows: list[tuple[Any, ...]] = []
        for (account, notice), notice_id in zip(pending, ids):
            if notice_id is None:
                log.warning("notice not given: the conversation is another account's or deleted",
                            run_id=notice.run_id, block_id=notice.block_id)
                continue
            payload = notice.payload(notice_id, self.now)
            rows.append((notice.conversation_id, notice_id, notice.run_id, notice.block_id, notice.revision,
                         notice.cause, as_json(payload), self.now))
            self.entries.append((account, notice.conversation_id, NOTICE_EVENT,
                                 lambda entry_id, payload=payload: {**payload, "entry_id": entry_id}))
        if rows:
            self.views.insert_rows(self.c, "{notices}", NOTICE_COLUMNS, rows)
        entries, self.entries = self.entries, []
        ids = self._number([(account, conversation) for account, conversation, _, _ in entries], "last_entry_id")
        entry_rows = [(conversation, entry_id, event, as_json(payload(entry_id)), self.now)
                      for (_, conversation, event, payload), entry_id in zip(entries, ids) if entry_id is not None]
        if entry_rows:
            self.views.insert_rows(self.c, "{entries}", ENTRY_COLUMNS, entry_rows)

    def _number(self, pending: Sequence[tuple[str, str]], column: str) -> list[int | None]:
        """The next ids of each (account, conversation) in ``column``'s numbering, in order
        (``None``: the conversation is another account's or deleted)."""
        if not pending:
            return []
        counts: dict[str, tuple[str, int]] = {}
        for account, conversation in pending:
            _, n = counts.get(conversation, (account, 0))
            counts[conversation] = (account, n + 1)
        last = self.views.number_notices(self.c, counts, self.now, column)
        next_id = {conversation: last[conversation] - n + 1 for conversation, (_, n) in counts.items()
                   if conversation in last}
        ids: list[int | None] = []
        for _, conversation in pending:
            if conversation not in next_id:
                ids.append(None)
                continue
            ids.append(next_id[conversation])
            next_id[conversation] += 1
        return ids

    def flush(self, *, notices: bool = True, writes: Any = None) -> None:
        """Write every pending notice, frame and every changed run and block row. With
        ``writes`` (the poll's end, :meth:`services.common.tables.Tables.together`) every write
        but the notices' is held there: the notices are numbered by a statement whose result is
        read, and no other write of the poll reads what another wrote."""
        v, stamp = self.views, self.now
        if notices:
            self.flush_notices()
        c = self.c if writes is None else writes
        self.flush_frames(writes)
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
                row = run.rows.get(block_id)
                if row is None:
                    row = run.rows[block_id] = BlockRow(None, None, None)
                stored = state.model_dump_json()
                if stored == row.stored and row.frame_id == row.stored_frame_id:
                    continue
                block_rows.append((p.run_id, block_id, stored, row.frame_id, row.frame_skeleton, stamp))
                row.stored, row.stored_frame_id = stored, row.frame_id
            run_rows.append((p.account_id, p.conversation_id, p.state, p.outcome, run.last_frame_id, int(p.deleted),
                             p.model_dump_json(exclude={"answer"}), to_json(run.live).decode(), run.conflict_count, stamp,
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
    message that appended it (:class:`imprint.delivery.handling.Context`)."""

    frame_columns = TRACED_FRAME_COLUMNS
    keeps_trace = True


def strip_key(views: ViewTables, c: Any, run_id: str, key: str, reason: str) -> None:
    """Replace the bodies of every frame of a key with skeletons (ids and hashes stay)."""
    c.execute(views.q("SELECT frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? AND skey = ?"),
              (run_id, key))
    updates = [(skeleton_text(row["event"], row["data"], row["body_sha256"], reason=reason), run_id, row["frame_id"])
               for row in c.fetchall()]
    if updates:
        views.strip_frames(c, updates)


def purge(views: ViewTables, c: Any, conversation_id: str, account_id: str | None) -> list[str]:
    """X8: drop every private body of the conversation's runs (frames' markdown and text,
    answer text, block states). Returns the purged run ids."""
    run_ids = views.conversation_runs(c, conversation_id, account_id)
    marks = ", ".join("?" for _ in PRIVATE_FRAME_EVENTS)
    for run_id in run_ids:
        ws = ViewWorkspace.of(views, HotRuns(0), c)
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
        updates = [(skeleton_text(row["event"], row["data"], row["body_sha256"], reason="purged"), run_id,
                    row["frame_id"]) for row in c.fetchall()]
        if updates:
            views.strip_frames(c, updates)
    if run_ids:
        views.close_conversation(c, conversation_id, account_id, now())
        log.info("conversation purged", conversation_id=conversation_id, runs=len(run_ids))
    return run_ids

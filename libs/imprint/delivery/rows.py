"""D1: the rows one Delivery poll reads and writes, held in memory — the pure half of the poll's
:class:`~imprint.delivery.projection.ViewWorkspace` (its store, the view tables, is the other).

**Declared first, read once.** :func:`imprint.delivery.handling.prepare` names every run of the
poll and the blocks its messages name (:meth:`PollRows.want`); the store reads them all in one
go before the first message is handled (locked, in one order). Handling a message then finds
its run here and appends its frames here: the run row's counter gives the frame ids (D1), a
superseded frame's skeleton was made with its draft, and nothing is read or written until the
poll's end. A run or block not loaded — a path off the usual one: a run the poll did not name,
a purge that dropped the poll's runs — is read through :meth:`PollRows.fetch`, the one hook
the store implements.

The pending frame rows are lists in the store's column order (:data:`FRAME_ROW`), so the store
writes them as they are."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from imprint.delivery import merge
from imprint.delivery.conversation import TURN_EVENT, Turn
from imprint.delivery.feeds import conversation_feed, notice_feed
from imprint.delivery.frame import FrameDraft
from imprint.delivery.frames import RunProjection
from imprint.delivery.notices import Notice

FRAME_ROW = ("run_id", "frame_id", "event", "data", "body_sha256", "skey", "superseded", "created_at")
"""What a pending frame row holds, in this order (a traced poll's rows add the ``traceparent``)."""
FRAME_ID, DATA, SUPERSEDED = FRAME_ROW.index("frame_id"), FRAME_ROW.index("data"), FRAME_ROW.index("superseded")


@dataclass
class BlockRow:
    """A block row as loaded: its state (as stored, to see whether it changed) and its live frame."""

    stored: str | None
    frame_id: int | None
    frame_skeleton: str | None
    stored_frame_id: int | None = None
    """The live frame as stored (``None``: a row not stored yet): the row is written again when
    its live frame or its state changed."""


@dataclass
class RunRows:
    projection: RunProjection
    last_frame_id: int
    conflict_count: int
    live: dict[str, list[Any]]
    """Run-level keys (``run-status``, ``progress``) → [live frame id, its skeleton]."""
    version: int
    """The run row's version these rows were read at (or written as)."""
    rows: dict[str, BlockRow] = field(default_factory=dict)
    """Loaded block rows (a name loaded and absent has ``stored`` None)."""
    all_blocks: bool = False
    """Every block row of the run is in ``rows`` (a name not there is a new block)."""
    dirty: bool = False
    touched: set[str] | None = field(default_factory=set)
    """The blocks this poll's messages named (``None``: all of them): only these are written."""


@dataclass(eq=False)
class PollRows:
    """The runs of one poll, with the frame rows, strips, notices, conversation entries and
    conflicts it has to write — collected so each row is written once, at the poll's end.
    A plain value when made: the store's subclass adds its connection and nothing runs."""

    keeps_trace: ClassVar[bool] = False
    """Each frame row ends with the ``traceparent`` of the span that appended it (a traced poll)."""

    now: str
    """The time of every row this poll writes (one transaction: one moment)."""
    wanted: dict[str, set[str] | None] = field(default_factory=dict)
    """Runs named by the poll's messages, with their blocks (``None``: all), not read yet."""
    runs: dict[str, RunRows] = field(default_factory=dict)
    touched: dict[str, None] = field(default_factory=dict)
    """Live feeds that changed (:mod:`imprint.delivery.feeds`): runs (new frames, a terminal, a
    purge) and conversations (new notices, a deletion)."""
    notices: list[tuple[str, Notice]] = field(default_factory=list)
    """D7: (account, notice) to number and write with the poll."""
    entries: list[tuple[str, str, str, Callable[[int], dict[str, Any]]]] = field(default_factory=list)
    """D9: (account, conversation, event, payload of its entry id) to number and write with the poll."""
    conflicts: list[merge.Conflict] = field(default_factory=list)
    inserts: list[list[Any]] = field(default_factory=list)
    """Pending frame rows (:data:`FRAME_ROW`)."""
    pending: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    """(run_id, key) → index in ``inserts`` of the key's newest pending frame, and the
    skeleton it is written as if a newer frame of the key follows in this poll."""
    strips: list[tuple[str, str, int]] = field(default_factory=list)
    """(skeleton, run_id, frame_id) of stored frames a newer frame of their key superseded."""
    appended: dict[str, list[list[Any]]] = field(default_factory=dict)
    """Each run's frame rows of this poll in id order, as they are stored once it commits: the
    rows of :attr:`inserts` themselves, so one superseded later in the poll holds its skeleton
    here too. What the poll hands its own process's live feeds, which read back only what a
    rewrite changed behind these rows (:attr:`rewritten`)."""
    rewritten: set[str] = field(default_factory=set)
    """Runs whose stored frames this poll rewrote beyond superseding them (a strip after the
    terminal, a purge): their frames are read back from the store, not handed over."""
    conflict_rows: list[tuple[Any, ...]] = field(default_factory=list)

    # -------------------------------------------------------------- the poll's runs

    def want(self, named: dict[str, set[str] | None]) -> None:
        """The poll will hold these runs with these blocks (``None``: every block of the run):
        recorded, read by the store at once before the first message is handled."""
        for run_id, blocks in named.items():
            have = self.wanted.get(run_id, set())
            self.wanted[run_id] = None if have is None or blocks is None else have | blocks

    def run(self, run_id: str, blocks: tuple[str, ...] | None = ()) -> RunRows:
        """The run, its answer state holding these blocks (``None``: all of them)."""
        run = self.runs.get(run_id)
        if run is None or not run.all_blocks and (blocks is None or any(b not in run.rows for b in blocks)):
            self.fetch(run_id, blocks)
            run = self.runs[run_id]
        if blocks is None:
            run.touched = None
        elif run.touched is not None:
            run.touched.update(blocks)
        held, rows = run.projection.answer.blocks, run.rows
        for name in rows if blocks is None else blocks:
            row = rows.get(name)
            if row is not None and row.stored is not None and name not in held:
                held[name] = merge.BlockState.model_validate_json(row.stored)
        return run

    def fetch(self, run_id: str, blocks: tuple[str, ...] | None) -> None:
        """Read what the poll does not hold yet of a run: its run row (into :attr:`runs`) and
        the rows of these blocks (``None``: every block row). The store's to implement."""
        raise LookupError(f"run {run_id} was not loaded")

    # -------------------------------------------------------------- frames

    def append(self, run: RunRows, drafts: Sequence[FrameDraft], conflicts: Sequence[merge.Conflict],
               trace: str | None = None) -> list[int]:
        run_id = run.projection.run_id
        run.dirty = True
        ids: list[int] = []
        error_frames: dict[tuple[str, int], int] = {}
        for draft in drafts:
            frame_id = self._frame(run, draft, trace)
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

    def _frame(self, run: RunRows, draft: FrameDraft, trace: str | None) -> int:
        """A frame row appended: its id the run's next (D1); the newest frame of its key
        before it becomes a skeleton (pending in this poll: written as one; stored: stripped)."""
        run_id = run.projection.run_id
        run.last_frame_id += 1
        frame_id = run.last_frame_id
        if draft.key is not None:
            pending = self.pending.get((run_id, draft.key))
            if pending is not None:  # superseded within this poll: written as a skeleton
                row = self.inserts[pending[0]]
                row[DATA] = pending[1]
                row[SUPERSEDED] = 1
            else:
                live = self._live(run, draft.key)
                if live is not None and live[0] is not None:
                    self.strips.append((live[1], run_id, int(live[0])))
                    self._superseded(run_id, int(live[0]), live[1])
            self.pending[(run_id, draft.key)] = (len(self.inserts), draft.superseded)
            self._set_live(run, draft.key, frame_id, draft.superseded)  # type: ignore[arg-type]
        row = [run_id, frame_id, draft.event, draft.text, draft.body_sha256, draft.key, 0, self.now]
        if self.keeps_trace:
            row.append(trace)
        self.inserts.append(row)
        self.appended.setdefault(run_id, []).append(row)
        return frame_id

    def _superseded(self, run_id: str, frame_id: int, skeleton: str | None) -> None:
        """A frame written earlier in this poll (before a flush) was superseded: its row here
        becomes the skeleton the strip writes."""
        rows = self.appended.get(run_id)
        at = frame_id - rows[0][FRAME_ID] if rows else -1
        if 0 <= at < len(rows):
            rows[at][DATA], rows[at][SUPERSEDED] = skeleton, 1

    def _live(self, run: RunRows, key: str) -> tuple[int | None, str | None] | None:
        if key.startswith("block:"):
            block_id = key.removeprefix("block:")
            if block_id not in run.rows and run.all_blocks:  # a block new in this poll
                run.rows[block_id] = BlockRow(None, None, None)
            row = run.rows.get(block_id)
            if row is None:  # never happens: a block frame names a block its message named
                raise AssertionError(f"block frame {key} of {run.projection.run_id} without its block row")
            return row.frame_id, row.frame_skeleton
        live = run.live.get(key)
        return (int(live[0]), live[1]) if live else None

    def _set_live(self, run: RunRows, key: str, frame_id: int, frame_skeleton: str) -> None:
        if key.startswith("block:"):
            row = run.rows[key.removeprefix("block:")]
            row.frame_id, row.frame_skeleton = frame_id, frame_skeleton
        else:
            run.live[key] = [frame_id, frame_skeleton]
        run.dirty = True

    # -------------------------------------------------------------- the conversation

    def notice(self, run: RunRows, notice: Notice) -> None:
        account = run.projection.account_id
        if account is not None:  # a run with a conversation always has its account
            self.notices.append((account, notice))
            # Named now: the policy hands the touched feeds to the consumer before the flush.
            self.touched[notice_feed(notice.conversation_id)] = None
            self.touched[conversation_feed(notice.conversation_id)] = None

    def turn(self, run: RunRows, turn: Turn) -> None:
        account = run.projection.account_id
        if account is not None:
            self.entries.append((account, turn.conversation_id, TURN_EVENT,
                                 lambda entry_id: turn.payload(entry_id, self.now)))
            self.touched[conversation_feed(turn.conversation_id)] = None

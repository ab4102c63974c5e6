"""The runs committed Delivery polls keep in memory (their rows: :class:`imprint.delivery.rows.RunRows`).

**Hot runs.** The runs a poll touched stay in memory with the rows they loaded, keyed by
the run row's ``version``, which every write of the run's rows increments under the row
lock. The next poll still locks and reads the run row; when its version is the cached
one, no other row is read. A kept block is its row's text as stored, not its parsed
state (unless its preview still awaits the commit the next poll most likely brings): a
poll parses only the blocks its messages name, and thousands of runs in flight cost a
few kilobytes per block rather than the parsed models' many objects.
Another instance's write, a purge or a failed transaction makes the copy stale or drops
it, and the run is read again. A run that ended or was deleted is not kept; the rest
are bounded in bytes (``IMPRINT_HOT_STATE_BYTES``), each run weighed by :func:`weigh` when
a poll gives it back.

**Idle runs leave.** A run no poll touched for :data:`IDLE_SECONDS` leaves too, whatever
the budget: a run that stops without its closed record reaching Delivery (a runtime that
never sends it, a load that opens runs and leaves them) is otherwise kept until the budget
pushes it out, and a Delivery that served ten thousand such runs would hold their rows for
as long as it lives, not as long as they are in flight. The next message of a run that
left reads its rows again, one poll's reads. Runs are kept in the order they were last
given back, so each poll lets go of the few whose time is up (an idle instance lets go at
its next poll)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from imprint.delivery.rows import RunRows

RUN_OVERHEAD = 16 * 1024
"""Bytes a kept run costs beyond its rows' text: its projection (identity, lifecycle, the
answer's order and counters) and the mappings that hold its rows."""
ROW_OVERHEAD = 512
"""Bytes a kept block row costs beyond its text: the row object and its two strings' headers."""
IDLE_SECONDS = 60.0
"""How long a run no poll touched stays kept: well beyond the pause between two proposals
of a run in flight (a paced run's is seconds), well below a process's life."""
PARSED_OVERHEAD = 8
"""A block kept parsed (its preview awaits its commit) costs this many times its stored
text: the parsed models' objects, where the row is one string."""


class HotRuns:
    """The runs committed polls left in memory, least recently used first. A poll takes a
    run out (the copy is then its own to change) and gives it back after its commit; a
    run that was not given back (a failed transaction) is read again."""

    def __init__(self, max_bytes: int, idle_seconds: float = IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._runs: OrderedDict[str, RunRows] = OrderedDict()
        """Least recently given back first: the front is also the first whose time is up."""
        self._weights: dict[str, int] = {}
        self._until: dict[str, float] = {}
        """When each kept run leaves if no poll touches it (:data:`IDLE_SECONDS`)."""
        self.held = 0
        """Bytes the kept runs weigh together (:func:`weigh`)."""

    def take(self, run_id: str, version: int) -> RunRows | None:
        """The cached run if it is the stored version (``None`` otherwise; a stale copy is dropped)."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return None
        self.held -= self._weights.pop(run_id)
        del self._until[run_id]
        return run if run.version == version else None

    def drop(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            self.held -= self._weights.pop(run_id)
            del self._until[run_id]

    def keep(self, runs: Iterable[RunRows]) -> None:
        now = self._clock()
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
            weight = weigh(run)
            self._runs[run.projection.run_id] = run
            self._weights[run.projection.run_id] = weight
            self._until[run.projection.run_id] = now + self.idle_seconds
            self.held += weight
        while self._runs and (self.held > self.max_bytes or self._until[next(iter(self._runs))] <= now):
            self.drop(next(iter(self._runs)))

    def __len__(self) -> int:
        return len(self._runs)


def weigh(run: RunRows) -> int:
    """What a kept run costs in memory, from the lengths of what it holds (its rows are
    walked anyway when it is kept): its rows' text, a block kept parsed at
    :data:`PARSED_OVERHEAD` times its text, and the fixed costs of a run and a row."""
    weight = RUN_OVERHEAD
    parsed = run.projection.answer.blocks
    for name, row in run.rows.items():
        text = len(row.stored or "")
        weight += ROW_OVERHEAD + text + len(row.frame_skeleton or "")
        if name in parsed:
            weight += PARSED_OVERHEAD * max(text, 1024)
    for _frame_id, skeleton in run.live.values():
        weight += len(skeleton or "")
    return weight

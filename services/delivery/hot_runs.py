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
a poll gives it back."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from imprint.delivery.rows import RunRows

RUN_OVERHEAD = 16 * 1024
"""Bytes a kept run costs beyond its rows' text: its projection (identity, lifecycle, the
answer's order and counters) and the mappings that hold its rows."""
ROW_OVERHEAD = 512
"""Bytes a kept block row costs beyond its text: the row object and its two strings' headers."""
PARSED_OVERHEAD = 8
"""A block kept parsed (its preview awaits its commit) costs this many times its stored
text: the parsed models' objects, where the row is one string."""


class HotRuns:
    """The runs committed polls left in memory, least recently used first. A poll takes a
    run out (the copy is then its own to change) and gives it back after its commit; a
    run that was not given back (a failed transaction) is read again."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._runs: OrderedDict[str, RunRows] = OrderedDict()
        self._weights: dict[str, int] = {}
        self.held = 0
        """Bytes the kept runs weigh together (:func:`weigh`)."""

    def take(self, run_id: str, version: int) -> RunRows | None:
        """The cached run if it is the stored version (``None`` otherwise; a stale copy is dropped)."""
        run = self._runs.pop(run_id, None)
        if run is None:
            return None
        self.held -= self._weights.pop(run_id)
        return run if run.version == version else None

    def drop(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            self.held -= self._weights.pop(run_id)

    def keep(self, runs: Iterable[RunRows]) -> None:
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
            self.held += weight
        while self.held > self.max_bytes and self._runs:
            run_id, _ = self._runs.popitem(last=False)
            self.held -= self._weights.pop(run_id)

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

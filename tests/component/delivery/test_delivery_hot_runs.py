"""Delivery's hot runs (``services.delivery.hot_runs``) are bounded in bytes
(``IMPRINT_HOT_STATE_BYTES``): each run weighed from the lengths of its rows when a poll
gives it back, least recently used runs out first past the budget; a run that ended is
not kept, and one no poll touched for its idle time leaves."""

from __future__ import annotations

import gc
import tracemalloc

from imprint.delivery.frames import RunProjection
from imprint.delivery.rows import BlockRow, RunRows
from services.delivery.hot_runs import ROW_OVERHEAD, RUN_OVERHEAD, HotRuns, weigh


def run_rows(run_id: str, blocks: int, text: int = 1000, version: int = 1) -> RunRows:
    rows = {f"blk-{i}": BlockRow("x" * text, i + 1, "y" * 100) for i in range(blocks)}
    return RunRows(RunProjection.new(run_id), last_frame_id=blocks, conflict_count=0,
                   live={"run-status": [blocks + 1, "z" * 50]}, version=version, rows=rows)


def test_a_run_weighs_its_rows_text_and_the_fixed_costs_of_a_run_and_its_rows() -> None:
    assert weigh(run_rows("r", blocks=3)) == RUN_OVERHEAD + 3 * (ROW_OVERHEAD + 1000 + 100) + 50


def test_a_run_weighs_at_least_what_it_takes_in_memory_and_not_several_times_more() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [run_rows(f"run-{r:06d}", blocks=8, text=950) for r in range(500)]
        gc.collect()
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    weighed = sum(weigh(run) for run in kept)
    assert taken <= weighed <= 3 * taken, (taken, weighed)


def test_the_hot_runs_stay_within_their_byte_budget_least_recently_used_out_first() -> None:
    one = weigh(run_rows("r", blocks=4))
    hot = HotRuns(max_bytes=10 * one)
    for step in range(200):
        hot.keep([run_rows(f"r{step % 37}", blocks=4, version=step)])
        assert hot.held <= hot.max_bytes
    assert len(hot) == 10
    kept = [f"r{step % 37}" for step in range(190, 200)]
    for run_id in kept:
        assert hot.take(run_id, max(s for s in range(200) if f"r{s % 37}" == run_id)) is not None, \
            "the ten most recently kept runs are the ones held"


def test_a_run_taken_or_dropped_no_longer_counts_and_an_ended_run_is_not_kept() -> None:
    hot = HotRuns(max_bytes=10**9)
    hot.keep([run_rows("a", blocks=2, version=5), run_rows("b", blocks=1)])
    assert hot.held == weigh(run_rows("a", blocks=2)) + weigh(run_rows("b", blocks=1))
    assert hot.take("a", 4) is None, "a stale copy is dropped"
    hot.drop("b")
    assert hot.held == 0 and len(hot) == 0
    ended = run_rows("c", blocks=2)
    ended.projection.terminal = True
    hot.keep([ended])
    assert hot.held == 0 and len(hot) == 0


def test_a_run_no_poll_touched_for_its_idle_time_leaves_whatever_the_budget() -> None:
    clock = [0.0]
    hot = HotRuns(max_bytes=10**9, idle_seconds=60, clock=lambda: clock[0])
    hot.keep([run_rows("old", blocks=2, version=1)])
    clock[0] = 30
    hot.keep([run_rows("busy", blocks=2, version=1)])
    clock[0] = 59
    hot.keep([run_rows("old", blocks=2, version=2)])  # touched again: its idle time starts over
    clock[0] = 100
    hot.keep([run_rows("new", blocks=1, version=1)])
    assert len(hot) == 2 and hot.held == weigh(run_rows("old", blocks=2)) + weigh(run_rows("new", blocks=1)), \
        "the run idle for longer than its time left at the next poll; the others stay"
    assert hot.take("busy", 1) is None
    clock[0] = 200
    hot.keep([])
    assert len(hot) == 0 and hot.held == 0, "a poll that touches nothing still lets the idle runs go"
    assert hot.take("old", 2) is None and hot.take("new", 1) is None

"""X10 on each store backend: the leases of open runs survive a journal's restart (the lane
records which runs are open), only the instance that owns a lane closes its runs, and
two instances that both think they own it close a run once."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from journal_helpers import Feeder, to_running

from imprint.contracts.runtime import RunHeartbeat
from imprint.contracts.topics import Topic
from imprint.journal.leases import RUNTIME_LOST, Lapse
from imprint.journal.lifecycle import State
from services.common.inbound import Inbound
from services.journal.application import RuntimeJournal

pytestmark = pytest.mark.integration

LEASE = 120.0


@dataclass
class Clock:
    now: float = 5000.0

    def __call__(self) -> float:
        return self.now


def leased(journal: RuntimeJournal, clock: Clock) -> RuntimeJournal:
    journal.clock = clock
    return journal


def announced(journal: RuntimeJournal, run_id: str) -> list[tuple[str, str | None]]:
    return [(m.type, getattr(m, "state", None)) for _, m in journal.announcements(limit=1000)
            if m is not None and m.run_id == run_id]


@pytest.mark.rule("X10")
def test_a_restarted_journal_still_closes_the_runs_its_predecessor_left_open(open_journal) -> None:
    clock = Clock()
    first = leased(open_journal(), clock)
    Feeder(first).send(*to_running("r-lost"), *to_running("r-other", message_id="m-other"), partition=0)
    first.close()  # the process is gone, and the deadlines it held in memory with it

    restarted = leased(open_journal(), clock)
    clock.now += 10 * LEASE
    assert restarted.lapse_due() == [], "a journal that was given no partition closes nothing"
    assert restarted.take_lanes([0]) == 2, "its lane records both runs as open"
    clock.now += LEASE - 1
    assert restarted.lapse_due() == [], "a taken run gets a full lease from the taking"
    clock.now += 1
    assert sorted(restarted.lapse_due(), key=lambda lapse: lapse.run_id) == [
        Lapse("r-lost", closed=True), Lapse("r-other", closed=True)]
    ex = restarted.execution("r-lost")
    assert ex.state is State.FAILED and ex.lapsed == RUNTIME_LOST
    assert ex.transitions[-1].reason == RUNTIME_LOST
    assert announced(restarted, "r-lost")[-3:] == [("run.lease_lapsed", None), ("run.transitioned", "failed"),
                                                  ("run.closed", "failed")]

    again = leased(open_journal(), clock)
    assert again.take_lanes([0]) == 0, "the closings released the runs from the lane"


@pytest.mark.rule("X10")
def test_two_instances_that_both_hold_a_lane_close_its_run_once(open_journal) -> None:
    """A rebalance can leave two instances holding a lane for a moment: the closing is one unit
    of work under optimistic concurrency, so the one that loses finds the run closed."""
    clock = Clock()
    a, b = leased(open_journal(), clock), leased(open_journal(), clock)
    Feeder(a).send(*to_running("r1"), partition=0)
    # b consumed the partition once too (its cache holds the running execution)
    b.process([Inbound(str(Topic.RUNTIME), 0, 50, RunHeartbeat(run_id="r1"))])
    assert b.take_lanes([0]) == 1

    clock.now += LEASE
    barrier = threading.Barrier(2)
    results: dict[str, list[Lapse]] = {}

    def sweep(name: str, journal: RuntimeJournal) -> None:
        barrier.wait()
        results[name] = journal.lapse_due()

    threads = [threading.Thread(target=sweep, args=(name, j)) for name, j in (("a", a), ("b", b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    closings = [lapse for lapses in results.values() for lapse in lapses if lapse.closed]
    assert closings == [Lapse("r1", closed=True)], results
    assert a.execution("r1").state is State.FAILED
    assert [kind for kind, _ in announced(a, "r1")].count("run.closed") == 1
    assert "r1" not in a.leases and "r1" not in b.leases

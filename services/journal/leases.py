"""The lease sweeper (X10): the journal closes the runs of its partitions whose lease lapsed
(:meth:`RuntimeJournal.lapse_due`; the rule is :mod:`imprint.journal.leases`). Its relay
then announces each closing like any transition (``imprint.runs.v1``) and the lapse to
Publication (``run.lease_lapsed`` on ``imprint.control.v1``).

The sweeper sleeps until the earliest lease it keeps lapses — with none kept, a lease's
length, since a lease taken meanwhile lapses no sooner — and never sweeps twice within
``IMPRINT_RUN_LEASE_SWEEP_SECONDS`` (at most a quarter of the lease), so runs lapsing one
after another are closed together: a lost run is closed at most that long after its lease
lapsed, and a journal whose runs' runtimes keep heartbeating, or that keeps none, does not
look every few seconds."""

from __future__ import annotations

import asyncio

from services.common.observability import get_logger
from services.common.settings import Settings
from services.journal.application import RuntimeJournal

log = get_logger(__name__)


def sweep_interval(settings: Settings) -> float:
    return min(settings.run_lease_sweep_seconds, settings.run_lease_seconds / 4)


LAPSE_MARGIN_SECONDS = 0.01
"""A sweep for a deadline starts this much after it: a timer that fires a hair early
would find the run not yet due and wait out a whole sweep interval."""


def next_sweep_in(journal: RuntimeJournal, settings: Settings, swept_at: float) -> float:
    """Seconds until the next sweep, after one at ``swept_at`` (on the journal's clock)."""
    now = journal.clock()
    deadline = journal.next_lapse()
    due = now + settings.run_lease_seconds if deadline is None else deadline + LAPSE_MARGIN_SECONDS
    return max(0.0, max(due, swept_at + sweep_interval(settings)) - now)


async def sweep_forever(journal: RuntimeJournal, settings: Settings) -> None:
    swept_at = journal.clock()
    while True:
        await asyncio.sleep(next_sweep_in(journal, settings, swept_at))
        swept_at = journal.clock()
        try:
            lapsed = await asyncio.to_thread(journal.lapse_due)
            for lapse in lapsed:
                if lapse.closed:
                    log.info("run lease lapsed; run closed failed (runtime_lost)", run_id=lapse.run_id)
        except Exception:
            log.exception("lease sweep failed; the next sweep retries")

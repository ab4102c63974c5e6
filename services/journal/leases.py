"""The lease sweeper (X10): every ``IMPRINT_RUN_LEASE_SWEEP_SECONDS`` (at most a quarter of
the lease), the journal closes the runs of its partitions whose lease lapsed
(:meth:`RuntimeJournal.lapse_due`; the rule is :mod:`imprint.journal.leases`). Its relay
then announces each closing like any transition (``imprint.runs.v1``) and the lapse to
Publication (``run.lease_lapsed`` on ``imprint.control.v1``)."""

from __future__ import annotations

import asyncio

from services.common.observability import get_logger
from services.common.settings import Settings
from services.journal.application import RuntimeJournal

log = get_logger(__name__)


def sweep_interval(settings: Settings) -> float:
    return min(settings.run_lease_sweep_seconds, settings.run_lease_seconds / 4)


async def sweep_forever(journal: RuntimeJournal, settings: Settings) -> None:
    interval = sweep_interval(settings)
    while True:
        await asyncio.sleep(interval)
        try:
            lapsed = await asyncio.to_thread(journal.lapse_due)
            for lapse in lapsed:
                if lapse.closed:
                    log.info("run lease lapsed; run closed failed (runtime_lost)", run_id=lapse.run_id)
        except Exception:
            log.exception("lease sweep failed; the next sweep retries")

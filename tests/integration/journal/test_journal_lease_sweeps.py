"""X10 on each store backend, as ``imprint serve journal`` runs it: the lease sweeper closes a
silent run once its lease lapsed, and looks for lapsed leases when one can be due, not on a
fixed tick while nothing is."""

from __future__ import annotations

import asyncio

import pytest
from journal_helpers import Feeder, to_running

from imprint.journal.lifecycle import State
from services.common.settings import Settings
from services.journal import leases
from services.journal.application import RuntimeJournal

pytestmark = pytest.mark.integration

LEASE = 1.0
SWEEP = 0.1
"""A sweep interval a tenth of the lease: a sweeper on a fixed tick looks ten times per lease."""


@pytest.mark.rule("X10")
def test_the_sweeper_closes_a_silent_run_looking_only_when_a_lease_can_be_due(journal_settings: Settings) -> None:
    settings = journal_settings.model_copy(update={"run_lease_seconds": LEASE, "run_lease_sweep_seconds": SWEEP})
    journal = RuntimeJournal.from_settings(settings)
    sweeps: list[float] = []
    lapse_due = journal.lapse_due

    def counted() -> list:
        sweeps.append(journal.clock())
        return lapse_due()

    journal.lapse_due = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        sweeper = asyncio.create_task(leases.sweep_forever(journal, settings))
        try:
            await asyncio.to_thread(Feeder(journal), *to_running("r-silent"))
            opened_at = journal.clock()
            for _ in range(200):  # up to 20 s: polled, the assertions below do not depend on it
                if journal.execution("r-silent").state is State.FAILED:
                    break
                await asyncio.sleep(0.1)
            assert journal.execution("r-silent").state is State.FAILED, "the silent run was closed (runtime_lost)"
            assert sweeps[-1] >= opened_at + LEASE, "closed once its lease lapsed, not before"
        finally:
            sweeper.cancel()
            await asyncio.gather(sweeper, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        journal.close()
    assert len(sweeps) <= 3, (
        f"{len(sweeps)} sweeps: one when a lease could first lapse, one at the run's deadline (at most a sweep "
        f"interval later), not one every {SWEEP} s")

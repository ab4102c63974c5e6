"""Publication snapshots a hot run from memory, spaced by what its state holds
(``PublicationLog.take_snapshots``), and each run's snapshots fall at its own point of
the interval: runs admitted together and proposing in turn do not all reach it in the
same poll (their snapshots, due together, held that poll and every preview behind it).
A run read back from its snapshot decides as the one that stayed in memory (R1)."""

from __future__ import annotations

from contextlib import closing

import pytest

from imprint.publication import PublicationRun
from services.common.event_log import LATEST_VERSION
from services.publication.application import PublicationLog, open_log
from tests.integration.publication.pubsupport import admitted, part
from tests.support.backends import Backend
from tests.support.feeder import Feeder

pytestmark = pytest.mark.integration

RUNS = [f"r-snap-{i}" for i in range(12)]
INTERVAL = PublicationLog.snapshotting_intervals[PublicationRun]


def snapshot_versions(app: PublicationLog, run: str) -> list[int]:
    assert app.snapshots is not None
    return [s.originator_version for s in app.snapshots.get(PublicationRun.id_for(run))]


@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_runs_proposing_in_turn_take_their_snapshots_at_their_own_points(backend: Backend) -> None:
    with closing(open_log(backend.settings)) as app:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        feed.send(*(admitted(run) for run in RUNS))
        turn = 0
        while not all(snapshot_versions(app, run) for run in RUNS) and turn < 2 * INTERVAL:
            feed.send(*(part(run, f"{run}-{turn}", f"Finding {turn} of {run}.") for run in RUNS))
            turn += 1
        per_turn = -(-app.repository.get(PublicationRun.id_for(RUNS[0])).version // turn)

        firsts = {run: snapshot_versions(app, run)[0] for run in RUNS}
        assert all(version <= INTERVAL + per_turn for version in firsts.values()), firsts
        assert len(set(firsts.values())) >= len(RUNS) // 2, f"the runs snapshot together: {firsts}"

        for run in RUNS:  # read back from its latest snapshot (and the events after it), as after a restart
            loaded = app.repository.get(PublicationRun.id_for(run), version=LATEST_VERSION)
            kept = app.repository.get(PublicationRun.id_for(run))
            assert vars(loaded) == vars(kept)

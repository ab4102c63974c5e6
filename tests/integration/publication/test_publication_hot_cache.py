"""Hot runs are bounded by what they hold in bytes, not only by how many there are
(``services.common.hot_cache.HotAggregates``, ``IMPRINT_HOT_STATE_BYTES``): with a small budget, a run falls out of
the cache while other runs grow, and its next proposal reads it again from the log — so
an exact duplicate is still recognised with its original receipt (P11) and a new block
still takes the next delivery ordinal. A run that ended leaves the cache at once, and
what reaches it later is decided the same way."""

from __future__ import annotations

from contextlib import closing

import pytest

from imprint.contracts.runtime import RunCompleted
from imprint.publication import PublicationRun
from services.common.event_log import stored
from services.publication.application import open_log
from tests.integration.publication.pubsupport import admitted, part
from tests.support.backends import Backend
from tests.support.feeder import Feeder

pytestmark = pytest.mark.integration

BODY = "Revenue grew 8% in 2024, led by services."


@pytest.mark.rule("P11")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_run_pushed_out_by_the_bound_is_read_again_and_still_knows_its_blocks(backend: Backend) -> None:
    budget = 40_000  # a run of one proposal weighs a few kilobytes, one of eight some 25
    with closing(open_log(backend.settings.model_copy(update={"hot_state_bytes": budget}))) as app:
        cache = app.repository.cache
        assert cache is not None and getattr(cache, "max_bytes", None) == budget
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        feed.send(admitted("r-hot-a"), part("r-hot-a", "a-1", BODY))
        first = stored(app, PublicationRun.id_for("r-hot-a")).settled("tool:a-1")
        assert first is not None and first.blocks[0].kind == "committed"

        # Other runs grow past the bound: r-hot-a, least recently used, is evicted.
        for run in ("r-hot-b", "r-hot-c"):
            feed.send(admitted(run), *(part(run, f"{run}-{i}", f"{BODY} ({run}, {i})") for i in range(8)))
        assert PublicationRun.id_for("r-hot-a") not in cache.cache  # type: ignore[attr-defined]
        assert cache.held <= budget or len(cache.cache) == 1  # type: ignore[attr-defined]

        feed.send(part("r-hot-a", "a-2", BODY), part("r-hot-a", "a-3", "A second finding."))
        run = stored(app, PublicationRun.id_for("r-hot-a"))
        again, new = run.settled("tool:a-2"), run.settled("tool:a-3")
        assert again is not None and [b.kind for b in again.blocks] == ["unchanged"]
        assert again.blocks[0].block_id == first.blocks[0].block_id
        assert again.blocks[0].receipt == first.blocks[0].receipt, "the original receipt is reused"
        assert new is not None and new.blocks[0].kind == "committed"
        assert [b.ordinal for b in run.live_blocks()] == [1, 2], "the ordinals go on from the log"


@pytest.mark.rule("P11")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_run_that_ended_leaves_the_hot_runs_and_a_late_proposal_reads_it_back(backend: Backend) -> None:
    with closing(open_log(backend.settings)) as app:
        cache = app.repository.cache
        run_id = PublicationRun.id_for("r-ended")
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        feed.send(admitted("r-ended"), part("r-ended", "e-1", BODY))
        assert run_id in cache.cache, "a run in flight stays hot"  # type: ignore[union-attr]
        first = stored(app, run_id).settled("tool:e-1")
        assert first is not None and first.blocks[0].kind == "committed"

        feed.send(RunCompleted(run_id="r-ended", outcome="answered"))
        assert run_id not in cache.cache, "an ended run is not kept"  # type: ignore[union-attr]
        assert stored(app, run_id).ended == "completed"

        feed.send(part("r-ended", "e-2", BODY), part("r-ended", "e-3", "A late finding."))
        assert run_id not in cache.cache  # type: ignore[union-attr]
        run = stored(app, run_id)
        again, late = run.settled("tool:e-2"), run.settled("tool:e-3")
        assert again is not None and [b.kind for b in again.blocks] == ["unchanged"]
        assert again.blocks[0].receipt == first.blocks[0].receipt, "the original receipt is reused"
        assert late is not None and late.blocks[0].kind == "committed"
        assert [b.ordinal for b in run.live_blocks()] == [1, 2], "the ordinals go on from the log"

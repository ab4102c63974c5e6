"""The weighing of real hot aggregates (``services.common.hot_cache``): what a run weighs in
the hot cache covers what it takes in memory, measured (tracemalloc), without exceeding it
several times over — the calibration of each application's ``in_memory_overhead`` — and a run growing in place
is re-weighed at its commit from what that commit recorded, without reading its history."""

from __future__ import annotations

import gc
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.workload import grants, opening, typical_part
from imprint.publication import PublicationRun
from imprint.shredding import InMemoryKeyring
from services.common.event_log import HotCacheApplication, evict
from services.common.hot_cache import HOT_STATE_BYTES, HotAggregates, WeighingMapper
from services.journal.application import RuntimeJournal
from services.publication.application import PublicationLog
from tests.support import runs
from tests.support.backends import memory_environment
from tests.support.feeder import Feeder

UNBOUNDED = str(10**12)
COVERED_AT_MOST = 3.0
"""Weighed may exceed measured by this much (the factor is one for every shape of run)."""


def hot_cache(app: HotCacheApplication) -> HotAggregates:
    cache = app.repository.cache
    assert isinstance(cache, HotAggregates)
    return cache


def measured_on_reload(app: HotCacheApplication) -> tuple[int, int]:
    """(bytes the cached aggregates take once read back from the log, bytes they are weighed at)."""
    cache = hot_cache(app)
    keys = list(cache.cache)
    evict(app, keys)
    assert cache.held == 0
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key in keys:
            app.repository.get(key)
        gc.collect()
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return taken, cache.held


@contextmanager
def publication() -> Iterator[tuple[PublicationLog, Callable[..., Any]]]:
    log = PublicationLog(InMemoryKeyring(), env={**memory_environment("publication"), HOT_STATE_BYTES: UNBOUNDED})
    try:
        yield log, Feeder(lambda batch: log.process(batch, lambda _: None)).send
    finally:
        log.close()


@pytest.mark.parametrize("proposals", [1, 4, 25])
def test_a_publication_run_weighs_at_least_what_it_takes_in_memory_and_not_several_times_more(proposals: int) -> None:
    with publication() as (log, send):
        for r in range(30):
            run_id = f"run-{r}"
            send(*opening(run_id), *(typical_part(run_id, f"call-{r}-{i}") for i in range(proposals)))
        weighed_by_commits = hot_cache(log).held
        taken, weighed = measured_on_reload(log)
    assert weighed == pytest.approx(weighed_by_commits, rel=1e-3), \
        "read back, a run weighs what its commits added up to (each commit's weight rounded down)"
    assert taken <= weighed <= COVERED_AT_MOST * taken, (taken, weighed, log.in_memory_overhead)


def test_a_journal_run_weighs_at_least_what_it_takes_in_memory_and_not_several_times_more() -> None:
    journal = RuntimeJournal({**memory_environment("journal"), HOT_STATE_BYTES: UNBOUNDED}, keyring=InMemoryKeyring())
    try:
        send = Feeder(journal.process).send
        for r in range(30):
            run_id = f"run-{r}"
            admission = runs.admitted(run_id, account_id="acct-1", question="How did revenue develop?")
            send(*runs.opened(admission), *grants(run_id), *(typical_part(run_id, f"call-{r}-{i}") for i in range(4)))
        taken, weighed = measured_on_reload(journal)
    finally:
        journal.close()
    assert taken <= weighed <= COVERED_AT_MOST * taken, (taken, weighed, journal.in_memory_overhead)


def test_a_run_growing_in_place_is_reweighed_at_its_commit_without_reading_its_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with publication() as (log, send):
        send(*opening("r-grow"), *(typical_part("r-grow", f"call-{i}") for i in range(3)))
        cache, run_id = hot_cache(log), PublicationRun.id_for("r-grow")
        before = cache.weight(run_id)
        assert before > 0
        decoded: list[uuid.UUID] = []
        decode = WeighingMapper.to_domain_event
        monkeypatch.setattr(WeighingMapper, "to_domain_event",
                            lambda self, stored: decoded.append(stored.originator_id) or decode(self, stored))
        seen = log.recorder.max_notification_id() or 0
        send(typical_part("r-grow", "call-3"))
        assert run_id not in decoded, "the hot run was not read back"
        recorded = sum(len(n.state) for n in log.recorder.select_notifications(start=seen + 1, limit=1000)
                       if n.originator_id == run_id)
        assert recorded > 0
        assert cache.weight(run_id) == before + int(recorded * log.in_memory_overhead)
        evict(log, [run_id])
        log.repository.get(run_id)
        assert run_id in decoded, "read back from the log, it is decoded (and weighed) again"

"""A whole-log replay lists the runs from their openings alone (issue 9): the
Publication store keeps an index of the ``PublicationRun.Opened`` events, so the run
index reads those, not every event of the log, and lists every run in the order it
was opened (R1), on every durable store; and its read of a page of runs gives each
run's events together and in version order, whatever order the table holds them in."""

from __future__ import annotations

import uuid
from contextlib import closing
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from services.publication.application import RUN_OPENED, open_log
from services.recovery import log_reader
from services.recovery.log_reader import opened_runs, run_index
from tests.support.backends import Backend
from tests.support.feeder import Feeder
from tests.support.runs import admitted, opened

pytestmark = pytest.mark.integration


def index_names(app: Any) -> set[str]:
    recorder = app.recorder
    with recorder.datastore.transaction(commit=False) as cursor:
        if hasattr(recorder.datastore, "schema"):
            cursor.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
                           (recorder.datastore.schema, recorder.events_table_name))
            return {row["indexname"] for row in cursor.fetchall()}
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                       (recorder.events_table_name,))
        return {row["name"] for row in cursor.fetchall()}


@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_the_run_index_reads_the_indexed_openings_and_lists_every_run_in_opening_order(backend: Backend) -> None:
    runs = [f"run-{n}" for n in (3, 1, 4, 5, 9, 2, 6)]
    with closing(open_log(backend.settings)) as app:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        for run_id in runs:
            feed.send(*opened(admitted(run_id, account_id="acct-1", question="q?")))
        assert f"{app.recorder.events_table_name}_run_openings_idx" in index_names(app)
        openings = app.recorder.select_notifications(start=1, limit=100, topics=[RUN_OPENED])
        assert len(openings) == len(runs)
        assert run_index(app).run_ids == runs
    with closing(open_log(backend.settings)) as again:  # opening an existing store keeps the index, once
        assert run_index(again).run_ids == runs


@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_the_runs_are_listed_a_page_at_a_time_as_they_are_asked_for(backend: Backend,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole-log replay hands its first runs to the workers while the rest are still
    being listed: the openings are read one page at a time, when the next run is asked for."""
    runs = [f"run-{n}" for n in range(5)]
    monkeypatch.setattr(log_reader, "PAGE", 2)
    with closing(open_log(backend.settings)) as app:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        for run_id in runs:
            feed.send(*opened(admitted(run_id, account_id="acct-1", question="q?")))
        pages: list[int] = []
        select = app.recorder.select_notifications

        def counted(*args: Any, **kwargs: Any) -> Any:
            page = select(*args, **kwargs)
            pages.append(len(page))
            return page

        monkeypatch.setattr(app.recorder, "select_notifications", counted)
        orphans: list[Any] = []
        found = opened_runs(app, app.recorder.max_notification_id(), orphans)
        assert [next(found), next(found)] == runs[:2] and pages == [2]
        assert next(found) == runs[2] and pages == [2, 2]
        assert list(found) == runs[3:] and pages == [2, 2, 1] and orphans == []


@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_page_of_streams_comes_back_each_stream_together_in_version_order(backend: Backend) -> None:
    """The replay's read of many streams at once puts each in version order itself (on
    PostgreSQL the rows come unsorted from the server), whatever order the table holds
    them in: here two streams interleaved, and one of them stored newest first."""
    first, second, absent = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    written = [(first, 3), (second, 1), (first, 1), (second, 2), (first, 2), (second, 3)]
    with closing(open_log(backend.settings)) as app:
        for originator_id, version in written:  # one insert each: the table keeps this order
            app.recorder.insert_events([StoredEvent(originator_id, version, "test:Event", b'{"v":%d}' % version)])
        read = app.recorder.select_events_of([second, absent, first])
    streams = [(s.originator_id, s.originator_version) for s in read]
    assert sorted(streams) == sorted(written)
    for originator_id in (first, second):
        mine = [i for i, (o, _) in enumerate(streams) if o == originator_id]
        assert mine == list(range(mine[0], mine[0] + 3)), "a stream's events come together"
        assert [streams[i][1] for i in mine] == [1, 2, 3]
    assert [s.state for s in read if s.originator_id == first] == [b'{"v":1}', b'{"v":2}', b'{"v":3}']

"""A whole-log replay lists the runs from their openings alone (issue 9): the
Publication store keeps an index of the ``PublicationRun.Opened`` events, so the run
index reads those, not every event of the log, and lists every run in the order it
was opened (R1), on every durable store."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import pytest

from services.publication.service import RUN_OPENED, open_log
from services.recovery.log_reader import run_index
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

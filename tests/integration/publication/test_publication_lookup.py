"""A poll's aggregates are looked up together (``StoredWorkspace.load_wanted``): one query
says which of a poll's runs and conversations are stored, and a new run's aggregates
are then known to be missing without a read each. What the log holds decides, on every
store: a stored run is still read and changed, a new one is created once, and a run
another writer created meanwhile is the usual lost race (the unit is redone)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import pytest

from imprint.publication import PublicationRun
from imprint.publication.conversations import ConversationRuns
from imprint.publication.handling import aggregates_read
from services.common.event_log import StoredWorkspace, evict, stored
from services.publication.application import open_log
from tests.support.backends import Backend
from tests.support.feeder import Feeder
from tests.support.runs import admitted, opened

pytestmark = pytest.mark.integration


def _counting_reads(app: Any) -> list[Any]:
    reads: list[Any] = []
    select_events = app.recorder.select_events

    def counted(originator_id: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(originator_id)
        return select_events(originator_id, *args, **kwargs)

    app.recorder.select_events = counted
    return reads


@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_polls_aggregates_are_looked_up_in_one_query_and_the_log_decides(backend: Backend) -> None:
    with closing(open_log(backend.settings)) as app:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        old = admitted("r-old", account_id="acct-1", question="q?", conversation_id="conv-old")
        feed.send(*opened(old))
        run_old, run_new = PublicationRun.id_for("r-old"), PublicationRun.id_for("r-new")
        conv_old, conv_new = ConversationRuns.id_for("conv-old"), ConversationRuns.id_for("conv-new")
        new = admitted("r-new", account_id="acct-1", question="q?", conversation_id="conv-new")
        assert aggregates_read(new) == (run_new, conv_new)
        assert app.recorder.stored_ids([run_old, run_new, conv_old, conv_new]) == {run_old, conv_old}

        evict(app, [run_old, conv_old])  # not in the hot cache: the store must be read
        ws = StoredWorkspace(app)
        reads = _counting_reads(app)
        ws.want([run_new, conv_new, run_new])
        ws.load_wanted()
        assert ws.get(PublicationRun, run_new) is None and ws.get(ConversationRuns, conv_new) is None
        assert reads == [], "a missing aggregate is known without a read of its own"
        ws.want([run_old])
        ws.load_wanted()
        found = ws.get(PublicationRun, run_old)
        assert found is not None and found.run_id == "r-old" and reads, "a stored one is still read"

        # End to end: the new run is created once, the stored one changed, nothing lost.
        feed.send(*opened(new), *opened(admitted("r-old2", account_id="acct-1", question="q?",
                                                 conversation_id="conv-old")))
        assert stored(app, run_new).conversation_id == "conv-new"
        assert stored(app, conv_old).runs == ["r-old", "r-old2"]
        assert stored(app, conv_new).runs == ["r-new"]

"""A poll's aggregates are looked up together (``StoredWorkspace.load_wanted``): one query
says which of a poll's runs and conversations are stored, and a new run's aggregates
are then known to be missing without a read each. What the log holds decides, on every
store: a stored run is still read and changed, a new one is created once, and a run
another writer created meanwhile is the usual lost race (the unit is redone)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import pytest

from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun, SourceRecord, handling
from imprint.publication.conversations import ConversationRuns
from imprint.publication.handling import aggregates_read
from imprint.publication.sources import SourceDependents
from services.common.event_log import StoredWorkspace, evict, stored
from services.common.inbound import Inbound
from services.publication.application import open_log
from tests.integration.publication.pubsupport import admitted as pub_admitted
from tests.integration.publication.pubsupport import granted, part, registered
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


def _counting(recorder: Any, name: str, calls: list[Any]) -> None:
    method = getattr(recorder, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else next(iter(kwargs.values())))
        return method(*args, **kwargs)

    setattr(recorder, name, counted)


@pytest.mark.rule("P15")
@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_polls_wanted_aggregates_load_in_bounded_statements_and_handling_reads_no_more(backend: Backend) -> None:
    """What a poll's ``prepare`` wanted is read once, before its handlers: one existence
    query per round (the wanted ids; then what those name as read with them, an admitted
    run's conversation), a read of each stored aggregate the hot cache does not hold, none
    for one it holds or one that is missing, and none for a cited source's reliance on a
    shard of the poll that is not held (only the candidate's own shard's is read, when held)
    — and the handlers read nothing more."""
    source = "src:public:annual-report-2024"
    with closing(open_log(backend.settings)) as app:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        feed.send(registered(source))
        feed.send(*[m for run in ("r-cold-1", "r-cold-2", "r-hot") for m in (pub_admitted(run), granted(run, source))])
        feed.send(part("r-cold-1", "call-0", f"Revenue rose [[cite:{source}]]."))
        cold = [PublicationRun.id_for("r-cold-1"), PublicationRun.id_for("r-cold-2"),
                ConversationRuns.id_for("conv-r-cold-1"), ConversationRuns.id_for("conv-r-cold-2"),
                SourceRecord.id_for(source)]
        evict(app, cold)  # the rest stays in the hot cache: r-hot, its conversation, the source's reliance on "0"
        existence: list[Any] = []
        reads: list[Any] = []
        snapshot_reads: list[Any] = []
        _counting(app.recorder, "stored_ids", existence)
        _counting(app.recorder, "select_events", reads)
        assert app.snapshots is not None
        _counting(app.snapshots.recorder, "select_events", snapshot_reads)
        poll = [part(run, f"call-{run}", f"It says so [[cite:{source}]].")
                for run in ("r-cold-1", "r-cold-2", "r-hot", "r-new")]
        names = [Inbound(str(Topic.RUNTIME), partition, 0, None).tracking.application_name for partition in (0, 1)]
        with app.sink.unit(names) as unit:
            assert unit.workspace.shards == ("0", "1")
            ws = unit.workspace
            prepared = handling.prepare(ws, poll)
            ws.load_wanted()
            assert len(existence) == 2, "one existence query for the wanted ids, one for what they name"
            assert PublicationRun.id_for("r-hot") not in existence[0], "a cached aggregate costs no query"
            assert SourceDependents.id_for(source, "1") not in existence[0], "a reliance not held is not looked for"
            assert SourceDependents.id_for(source, "0") in ws.store
            assert sorted(reads, key=str) == sorted(cold, key=str), "each stored aggregate not cached is read once"
            assert sorted(snapshot_reads, key=str) == sorted(cold, key=str), "… from its latest snapshot on"
            for message in prepared:
                handling.handle(ws, message, handling.Context(shard="0"))
            assert (len(existence), len(reads), len(snapshot_reads)) == (2, len(cold), len(cold)), \
                "the handlers read nothing more"
            ws.forget()  # nothing of this unit is recorded

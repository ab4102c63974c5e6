"""The poll recorder on PostgreSQL sends the stored events in binary: every byte of a
state comes back as it was written (sealed bodies are arbitrary bytes), and the
notification ids the library returns are the ones stored."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from eventsourcing.persistence import InfrastructureFactory, IntegrityError, StoredEvent, Tracking
from eventsourcing.utils import Environment

from services.common.backends import backend_for
from services.common.recorders import PostgresPollRecorder
from services.common.settings import Settings

pytestmark = [pytest.mark.integration,
              pytest.mark.backends("postgres", reason="PostgreSQL's poll recorder (binary inserts, one-statement positions)")]


@contextmanager
def poll_recorder(settings: Settings, name: str) -> Iterator[PostgresPollRecorder]:
    """The process recorder a log of ``name`` gets from its configuration (closed afterwards)."""
    factory = InfrastructureFactory.construct(Environment(name=name, env=backend_for(settings).environment(name)))
    try:
        recorder = factory.process_recorder()
        assert isinstance(recorder, PostgresPollRecorder)
        yield recorder
    finally:
        factory.close()


@pytest.mark.rule("P15")
def test_a_configuration_whose_inserts_would_drop_the_trackings_is_refused(isolated: Settings) -> None:
    from eventsourcing.persistence import ProgrammingError

    env = {**backend_for(isolated).environment("functions"), "POSTGRES_ENABLE_DB_FUNCTIONS": "y"}
    factory = InfrastructureFactory.construct(Environment(name="functions", env=env))
    try:
        with pytest.raises(ProgrammingError, match="POSTGRES_ENABLE_DB_FUNCTIONS"):
            factory.process_recorder()
    finally:
        factory.close()


@pytest.mark.rule("P15")
def test_binary_events_round_trip_every_byte_with_their_trackings(isolated: Settings) -> None:
    with poll_recorder(isolated, "bytes") as recorder:
        assert "unnest(%b::" in recorder.insert_events_statement.as_string(None)
        originator = uuid.uuid4()
        states = [bytes(range(256)), b"\\x00'\"{}\n" * 200, "текст 文本 ✓".encode()]
        events = [StoredEvent(originator_id=originator, originator_version=v, topic="t:e", state=s)
                  for v, s in enumerate(states, start=1)]
        ids = recorder.insert_events(events, trackings=[Tracking("topic#0", 7), Tracking("topic#1", 3)])
        assert [e.state for e in recorder.select_events(originator)] == states
        assert ids == [n.id for n in recorder.select_notifications(start=None, limit=10)]
        assert recorder.max_tracking_id("topic#0") == 7 and recorder.max_tracking_id("topic#1") == 3


@pytest.mark.rule("P15")
def test_the_statements_of_every_poll_are_rendered_once_and_say_what_the_librarys_say(isolated: Settings) -> None:
    from eventsourcing.postgres import PostgresProcessRecorder
    from psycopg.sql import SQL

    with poll_recorder(isolated, "rendered") as recorder:
        stock = PostgresProcessRecorder(recorder.datastore, events_table_name=recorder.events_table_name,
                                        tracking_table_name=recorder.tracking_table_name)
        pairs = [*zip(recorder.lock_table_statements, stock.lock_table_statements, strict=True),
                 (recorder.insert_tracking_statement, stock.insert_tracking_statement),
                 (recorder.max_tracking_id_statement, stock.max_tracking_id_statement)]
        for ours, theirs in pairs:
            assert type(ours) is SQL, f"{ours!r} is composed again on every execution"
            assert ours.as_string(None) == theirs.as_string(None)
        originator = uuid.uuid4()
        recorder.insert_events([StoredEvent(originator_id=originator, originator_version=1, topic="t:e", state=b"x")],
                               trackings=[Tracking("topic#0", 1)])
        with pytest.raises(IntegrityError):
            recorder.insert_events([StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="t:e",
                                                state=b"y")], trackings=[Tracking("topic#0", 1)])
        assert recorder.max_tracking_id("topic#0") == 1, "a redelivered position still fails its transaction"


@pytest.mark.rule("P15")
def test_a_polls_trackings_go_in_one_statement_and_one_position_already_recorded_fails_them_all(
        isolated: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with poll_recorder(isolated, "trackings") as recorder:
        first = StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="t:e", state=b"a")
        recorder.insert_events([first], trackings=[Tracking("topic#0", 5), Tracking("topic#1", 5)])
        executed: list[str] = []
        original = recorder.record_positions

        def counted(curs, trackings):  # type: ignore[no-untyped-def]
            executed.append(",".join(t.application_name for t in trackings))
            return original(curs, trackings)

        monkeypatch.setattr(recorder, "record_positions", counted)
        late = StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="t:e", state=b"b")
        with pytest.raises(IntegrityError, match="topic#1 5"):  # topic#1 is at 5 already; topic#2 is new
            recorder.insert_events([late], trackings=[Tracking("topic#0", 6), Tracking("topic#1", 5),
                                                      Tracking("topic#2", 1)])
        assert executed == ["topic#0,topic#1,topic#2"], "one statement for the poll's trackings"
        assert recorder.select_events(late.originator_id) == [], "nothing of the failed poll is stored"
        assert [recorder.max_tracking_id(f"topic#{p}") for p in range(3)] == [5, 5, None]
        ids = recorder.insert_events([late], trackings=[Tracking("topic#0", 6), Tracking("topic#1", 6),
                                                        Tracking("topic#2", 1)])
        assert ids is not None and len(ids) == 1
        assert [recorder.max_tracking_id(f"topic#{p}") for p in range(3)] == [6, 6, 1]


@pytest.mark.rule("R1")
def test_the_publication_logs_snapshots_go_in_binary_and_come_back_byte_for_byte(isolated: Settings) -> None:
    from services.publication.application import open_log

    app = open_log(isolated)
    try:
        assert app.snapshots is not None
        recorder = app.snapshots.recorder
        assert "unnest(%b::" in recorder.insert_events_statement.as_string(None)  # type: ignore[attr-defined]
        originator = uuid.uuid4()
        state = bytes(range(256)) * 800  # a snapshot of a long run: ~200 KB of arbitrary bytes
        recorder.insert_events([StoredEvent(originator_id=originator, originator_version=100, topic="t:s",
                                            state=state)])
        (read,) = recorder.select_events(originator, desc=True, limit=1)
        assert read.state == state and read.originator_version == 100
    finally:
        app.close()

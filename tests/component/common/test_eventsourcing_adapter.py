"""The contract of :mod:`services.common.eventsourcing_adapter` with the pinned eventsourcing:
each private hook it uses still has the signature it relies on and is still called where
it relies on it (inside the insert transaction, in this order), and the log's public
recording path still does what the library's ``Application.save`` does. An upgrade of the
library that changes any of it fails here, not in a log that silently stops recording its
positions."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import InfrastructureFactory, IntegrityError, StoredEvent, Tracking
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresProcessRecorder, PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteProcessRecorder, SQLiteTrackingRecorder
from eventsourcing.utils import Environment

from services.common.backends import backend_for
from services.common.event_log import HotCacheApplication
from services.common.eventsourcing_adapter import PINNED_VERSION, insert_tracking, max_tracking_id
from services.common.recorders import COMMITTER, PostgresPollRecorder, SQLitePollRecorder
from tests.support.backends import backend_settings


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_KEYWORD


@pytest.mark.rule("P15")
def test_the_installed_eventsourcing_is_the_one_the_adapter_was_read_from() -> None:
    """Another release: read its recorders again, update the adapter and this contract."""
    assert version("eventsourcing") == PINNED_VERSION


@pytest.mark.rule("P15")
def test_each_hook_has_the_signature_the_adapter_relies_on() -> None:
    assert parameters(PostgresApplicationRecorder._insert_events) == [("self", P), ("curs", P),
                                                                      ("stored_events", P), ("_", K)]
    assert parameters(PostgresProcessRecorder._insert_events) == [("self", P), ("curs", P),
                                                                  ("stored_events", P), ("kwargs", K)]
    assert parameters(SQLiteApplicationRecorder._insert_events) == [("self", P), ("c", P),
                                                                    ("stored_events", P), ("_", K)]
    assert parameters(SQLiteProcessRecorder._insert_events) == [("self", P), ("c", P),
                                                                ("stored_events", P), ("kwargs", K)]
    assert parameters(PostgresApplicationRecorder._notify_channel) == [("self", P), ("curs", P)]
    for recorder in (PostgresTrackingRecorder, SQLiteTrackingRecorder):
        assert [name for name, _ in parameters(recorder._insert_tracking)] in (["self", "curs", "tracking"],
                                                                               ["self", "c", "tracking"])
        assert [name for name, _ in parameters(recorder._max_tracking_id)] in (["self", "application_name", "curs"],
                                                                               ["self", "application_name", "c"])


# --- PostgreSQL: where the library calls the hooks, seen from the statements it runs --------


class Cursor:
    def __init__(self, executed: list[str]) -> None:
        self.executed = executed
        self.statusmessage = ""
        self._rows: list[dict[str, Any]] = []

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def execute(self, query: Any, params: Any = None, prepare: bool | None = None) -> None:
        text = (query if isinstance(query, str) else query.as_string(None)).strip()
        self.executed.append(text)
        if "unnest(%s::text[], %s::bigint[])" in text:  # the poll's positions, one statement
            self._rows = [{"application_name": name} for name in params[0]]
        elif text.startswith("INSERT"):
            self.statusmessage = f"INSERT 0 {len(params[0])}"
            self._rows = [{"notification_id": n} for n in range(1, len(params[0]) + 1)]

    def fetchall(self) -> list[dict[str, Any]]:
        return self._rows


class Pipeline:
    def __init__(self, executed: list[str]) -> None:
        self.executed = executed

    def sync(self) -> None:
        self.executed.append("-- sync")


class Connection:
    autocommit = True

    def __init__(self, executed: list[str]) -> None:
        self.executed = executed

    @contextmanager
    def pipeline(self) -> Iterator[Pipeline]:
        yield Pipeline(self.executed)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.executed.append("-- begin")
        yield
        self.executed.append("-- commit")

    def cursor(self) -> Cursor:
        return Cursor(self.executed)


class Datastore:
    """What the library's PostgreSQL recorders read of their datastore, recording what they run."""

    schema = "imprint"
    originator_id_type = "uuid"
    single_row_tracking = True
    enable_db_functions = False
    lock_timeout = 0

    def __init__(self) -> None:
        self.executed: list[str] = []
        self.db_type_names: set[str] = set()
        self.psycopg_python_types = {"stored_event_uuid": lambda *fields: fields}

    def register_type_adapters(self) -> None:
        return None

    @contextmanager
    def get_connection(self) -> Iterator[Connection]:
        yield Connection(self.executed)


@pytest.mark.rule("P15")
def test_postgres_writes_the_positions_then_locks_notifies_and_inserts_in_one_transaction() -> None:
    """``insert_events`` calls ``_insert_events`` (the positions) inside its transaction,
    before ``_insert_stored_events`` locks the table, sends ``_notify_channel`` (with this
    process's mark) and inserts the events."""
    datastore = Datastore()
    recorder = PostgresPollRecorder(datastore, events_table_name="log_events",  # type: ignore[arg-type]
                                    tracking_table_name="log_tracking")
    event = StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="t:e", state=b"{}")
    ids = recorder.insert_events([event], trackings=[Tracking("topic#0", 7), Tracking("topic#1", 3)])
    assert ids == [1]
    executed = datastore.executed
    begin, commit = executed.index("-- begin"), executed.index("-- commit")
    inside = executed[begin + 1:commit]
    kinds = [("positions" if "unnest(%s::text[], %s::bigint[])" in s else "lock" if s.startswith(("LOCK", "SET LOCAL"))
              else "notify" if s.startswith("NOTIFY") else "insert" if s.startswith("INSERT") else s) for s in inside]
    assert kinds == ["positions", *["lock"] * len(recorder.lock_table_statements), "notify", "insert", "-- sync"]
    assert COMMITTER in inside[kinds.index("notify")]


@pytest.mark.rule("P15")
def test_postgres_records_a_poll_without_events_in_a_transaction_of_its_own() -> None:
    """A poll that changes nothing still moves its positions: the library calls the hook
    even when there is no event to insert."""
    datastore = Datastore()
    recorder = PostgresPollRecorder(datastore, events_table_name="log_events",  # type: ignore[arg-type]
                                    tracking_table_name="log_tracking")
    recorder.insert_events([], trackings=[Tracking("topic#0", 8)])
    statements = [s for s in datastore.executed if not s.startswith("--")]
    assert len(statements) == 1 and "unnest(%s::text[], %s::bigint[])" in statements[0]
    assert datastore.executed[0] == "-- begin" and datastore.executed[-1] == "-- commit"


# --- SQLite: the same contract, on a real file ---------------------------------------------


@pytest.fixture
def sqlite_recorder(tmp_path: Path) -> Iterator[SQLitePollRecorder]:
    env = backend_for(backend_settings("sqlite", tmp_path / "state")).environment("contract")
    factory = InfrastructureFactory.construct(Environment(name="contract", env=env))
    try:
        recorder = factory.process_recorder()
        assert isinstance(recorder, SQLitePollRecorder)
        yield recorder
    finally:
        factory.close()


@pytest.mark.rule("P15")
def test_sqlite_records_the_positions_with_the_events_or_neither(sqlite_recorder: SQLitePollRecorder) -> None:
    """``insert_events`` calls ``_insert_events`` inside its transaction and returns the
    notification ids it answers; a position that does not move forward undoes the events."""
    originator = uuid.uuid4()
    first = StoredEvent(originator_id=originator, originator_version=1, topic="t:e", state=b"{}")
    ids = sqlite_recorder.insert_events([first], trackings=[Tracking("topic#0", 7), Tracking("topic#1", 3)])
    assert ids == [n.id for n in sqlite_recorder.select_notifications(start=None, limit=10)]
    assert sqlite_recorder.max_tracking_id("topic#0") == 7 and sqlite_recorder.max_tracking_id("topic#1") == 3
    second = StoredEvent(originator_id=originator, originator_version=2, topic="t:e", state=b"{}")
    with pytest.raises(IntegrityError):
        sqlite_recorder.insert_events([second], trackings=[Tracking("topic#0", 7)])
    assert [e.originator_version for e in sqlite_recorder.select_events(originator)] == [1]
    sqlite_recorder.insert_events([], trackings=[Tracking("topic#0", 9)])
    assert sqlite_recorder.max_tracking_id("topic#0") == 9


@pytest.mark.rule("P15")
def test_one_position_is_read_and_written_on_the_callers_cursor(sqlite_recorder: SQLitePollRecorder) -> None:
    with sqlite_recorder.datastore.transaction(commit=True) as c:
        assert max_tracking_id(sqlite_recorder, c, "topic#2") is None
        insert_tracking(sqlite_recorder, c, Tracking("topic#2", 4))
        assert max_tracking_id(sqlite_recorder, c, "topic#2") == 4
        with pytest.raises(IntegrityError):
            insert_tracking(sqlite_recorder, c, Tracking("topic#2", 4))
    assert sqlite_recorder.max_tracking_id("topic#2") == 4


# --- the public recording path against the library's save ----------------------------------


class Counter(Aggregate):
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    @staticmethod
    def create_id(name: str) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_URL, name)

    def add(self) -> None:
        self.trigger_event(self.Added)

    class Added(Aggregate.Event):
        def apply(self, counter: Counter) -> None:
            counter.count += 1


class Counters(HotCacheApplication):
    snapshotting_intervals = {Counter: 3}


@pytest.mark.rule("P15")
def test_the_public_recording_path_records_what_the_librarys_save_records() -> None:
    """``HotCacheApplication.record`` is the library's ``Application.save`` rebuilt from its
    public parts: on the same aggregates both store the same events, take the same
    snapshots and leave the same aggregates in the cache."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
    theirs, ours = Counters(env), Counters(env)
    for app, save in ((theirs, lambda *objs: Application.save(theirs, *objs)), (ours, ours.save)):
        counter = Counter("c")
        for _ in range(7):
            counter.add()
        assert [r.notification.id for r in save(counter)] == list(range(1, 9))
        counter.add()
        assert [r.notification.id for r in save(counter)] == [9]
    counter_id = Counter.create_id("c")
    assert [(n.originator_version, n.topic) for n in theirs.notification_log.select(start=1, limit=10)] == \
           [(n.originator_version, n.topic) for n in ours.notification_log.select(start=1, limit=10)]
    assert theirs.snapshots is not None and ours.snapshots is not None
    assert [s.originator_version for s in theirs.snapshots.get(counter_id)] == \
           [s.originator_version for s in ours.snapshots.get(counter_id)] == [3, 6, 9]
    assert theirs.repository.cache is not None and ours.repository.cache is not None
    assert theirs.repository.cache.get(counter_id).count == ours.repository.cache.get(counter_id).count == 8

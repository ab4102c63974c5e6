"""Writes a real Publication log (on the test's store backend) through
``PublicationLog.process`` with ``Inbound`` records, as the consumer would, and runs
the recovery commands against it."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.runtime import (
    AnswerPart,
    AnswerText,
    EvidenceGranted,
    NumericIssued,
    QuestionConditionSet,
    RunAdmitted,
)
from imprint.contracts.sources import SourceRegistered
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun
from services.common.backends import backend_for
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.publication.application import PublicationLog
from services.publication.application import open_log
from services.recovery import cli
from tests.support.feeder import Feeder as OneFeeder

ACCOUNT = "acct-1"
OTHER = "acct-2"
PUBLIC = "src:public:annual-report-2024"
PRIVATE_OWN = "src:private:acct-1:memo"

Emit = Callable[[Sequence[tuple[Topic, Message]]], None]


class Feeder(OneFeeder[None]):
    """The tests' one feeder (``tests.support.feeder``) for ``PublicationLog.process``: one
    consumer poll each call, with offsets per topic (partition 0) continuing after what the
    log already committed, as a consumer would."""

    def __init__(self, app: PublicationLog) -> None:
        self.app = app
        self.emitted: list[tuple[Topic, Message]] = []
        super().__init__(self.poll, topic_of=lambda _: Topic.RUNTIME,
                         resume=lambda topic, partition: app.position(f"{topic}#{partition}") + 1)

    def __call__(self, *messages: Message, topic: Topic = Topic.RUNTIME, emit: Emit | None = None) -> None:
        self.poll(self.wrap(*messages, topic=topic), emit)

    def poll(self, batch: list[Inbound], emit: Emit | None = None) -> None:
        self.app.process(batch, emit or self.emitted.extend)


@contextmanager
def feeding(settings: Settings) -> Iterator[tuple[PublicationLog, Feeder]]:
    """The Publication log on ``settings`` and a feeder into it; the log is closed afterwards."""
    from services.publication.application import open_log

    with closing(open_log(settings)) as app:
        yield app, Feeder(app)


def admitted(run_id: str, account: str = ACCOUNT) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=account, conversation_id=f"conv-{run_id}", message_id=f"m-{run_id}",
                       question="What changed?", qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"))


def granted(run_id: str, source_id: str = PUBLIC, scope: str = "public", owner: str = "publisher") -> EvidenceGranted:
    return EvidenceGranted(run_id=run_id, source_id=source_id, scope=scope, owner_account_id=owner, title=source_id)


def registered(source_id: str = PUBLIC, scope: str = "public", owner: str = "publisher") -> SourceRegistered:
    return SourceRegistered(source_id=source_id, scope=scope, owner_account_id=owner, title=source_id)


def numeric(run_id: str, value: str, version: int, handle: str = "num-weight") -> NumericIssued:
    return NumericIssued(run_id=run_id, handle_id=handle, value=value, unit="%", version=version, source_id=PUBLIC)


def part(run_id: str, call: str, markdown: str, **arguments: Any) -> AnswerPart:
    return AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id=call, sealed=True,
                      arguments={"markdown": markdown, **arguments})


def text(run_id: str, body: str, segment: int = 0, turn: str = "turn-1") -> AnswerText:
    return AnswerText(run_id=run_id, turn_id=turn, segment=segment, text=body)


def run_cli(command: Callable[..., int], settings: Settings, *args: Any, **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command(settings, *args, out=out, err=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def replay_lines(settings: Settings, run_id: str | None = None, verify: bool = False) -> tuple[int, list[dict]]:
    code, out, _ = run_cli(cli.replay, settings, run_id, verify)
    return code, [json.loads(line) for line in out.splitlines() if line.strip()]


def views(lines: list[dict]) -> dict[str, dict]:
    return {line["run_id"]: line for line in lines if "run_id" in line}


def block_ids(view_line: dict) -> list[str]:
    return [b["block_id"] for b in view_line["view"]["blocks"]]


@contextmanager
def log_rows(settings: Settings) -> Iterator[tuple[Any, str, Callable[[str], str]]]:
    """A write transaction on the Publication log's own datastore, on its backend: the
    cursor, the events table's name and the dialect's placeholder fit (``?`` → its own)."""
    with closing(open_log(settings)) as app:
        recorder: Any = app.recorder
        tables = backend_for(settings).tables("publication")
        try:
            with recorder.datastore.transaction(commit=True) as cursor:
                yield cursor, tables.table(recorder.events_table_name), tables.q
        finally:
            tables.close()


def stored_state(settings: Settings, run_id: str, version: int) -> dict[str, Any]:
    with log_rows(settings) as (cursor, events, q):
        cursor.execute(q(f"SELECT state FROM {events} WHERE originator_id = ? AND originator_version = ?"),
                       (_id(settings, run_id), version))
        row = cursor.fetchone()
    assert row is not None
    return json.loads(bytes(row["state"]))


def overwrite_state(settings: Settings, run_id: str, version: int, state: bytes) -> None:
    """Damage one stored event row, as disk corruption or a stray manual edit would."""
    with log_rows(settings) as (cursor, events, q):
        cursor.execute(q(f"UPDATE {events} SET state = ? WHERE originator_id = ? AND originator_version = ? "
                         "RETURNING originator_version"), (state, _id(settings, run_id), version))
        assert len(cursor.fetchall()) == 1


def _id(settings: Settings, run_id: str) -> Any:
    """The run's aggregate id as the backend stores it (a UUID; its hex in SQLite)."""
    aggregate_id = PublicationRun.id_for(run_id)
    return aggregate_id if settings.database_url else aggregate_id.hex


def table_exists(settings: Settings, table: str) -> bool:
    """Whether the deployment's stores hold ``table`` (``journal_events``: the journal's store)."""
    return backend_for(settings).has_log(table.removesuffix("_events"))


def damage_snapshot_block(settings: Settings, run_id: str, field: str, value: Any) -> str:
    """Change one field of one block in the run's latest stored snapshot (the snapshot no
    longer agrees with the events it was taken from); returns that block's id."""
    with closing(open_log(settings)) as app:
        assert app.snapshots is not None
        recorder: Any = app.snapshots.recorder
        tables = backend_for(settings).tables("publication")
        try:
            with recorder.datastore.transaction(commit=True) as cursor:
                table, q = tables.table(recorder.events_table_name), tables.q
                cursor.execute(q(f"SELECT originator_version, state FROM {table} WHERE originator_id = ? "
                                 "ORDER BY originator_version DESC LIMIT 1"), (_id(settings, run_id),))
                row = cursor.fetchone()
                assert row is not None, "the run has a stored snapshot"
                state = json.loads(bytes(row["state"]))
                block_id, block = next(iter(state["state"]["blocks"].items()))
                block[field] = value
                cursor.execute(q(f"UPDATE {table} SET state = ? WHERE originator_id = ? AND originator_version = ?"),
                               (json.dumps(state).encode(), _id(settings, run_id), row["originator_version"]))
        finally:
            tables.close()
    return block_id


def snapshot_versions(settings: Settings, run_id: str) -> list[int]:
    """The versions the run's stored snapshots were taken at (the log's own snapshot store)."""
    with closing(open_log(settings)) as app:
        assert app.snapshots is not None
        return sorted(int(s.originator_version) for s in app.snapshots.get(PublicationRun.id_for(run_id)))

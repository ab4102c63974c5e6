"""The delivery projection, persisted: per-run frames, runs, answer views, conflicts
and the Kafka position — all written in one transaction per batch.

The Kafka position is eventsourcing's tracking record (``Inbound.tracking``:
application ``<topic>#<partition>``, notification id = offset), recorded in the same
transaction as the rows it caused, the way eventsourcing's docs build materialized
views: :class:`PostgresDeliveryRecorder` / :class:`SQLiteDeliveryRecorder` subclass
the tracking recorders and add their own tables. A redelivered message (its offset is
already tracked) changes nothing and appends no frame; a restart loses neither views
nor resume positions.

Frames get a per-run id 1, 2, 3, … (D1). A frame superseded by a newer frame of the
same key (the same block, ``run-status``, ``progress``) keeps its id, event and hash
but loses its body (see :mod:`imprint.delivery.frames`), so a new client replaying
from id 1 first sees the current merged view, never a withdrawn body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteDatastore, SQLiteTrackingRecorder
from eventsourcing.utils import Environment
from psycopg.sql import SQL

from imprint.contracts.runs import RunClosed
from imprint.delivery import merge
from imprint.delivery.frames import (
    DONE,
    SUMMARY,
    Frame,
    FrameDraft,
    RunProjection,
    skeleton,
    step,
    terminal_drafts,
)
from imprint.delivery.summary import validate_stream
from services.common.observability import get_logger
from services.common.settings import Settings
from services.common.eventstore import store_environment
from services.common.inbound import Inbound

log = get_logger(__name__)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")
PRIVATE_FRAME_EVENTS = ("answer-preview", "answer-publication", "answer-withdrawn", "answer-rejected",
                        "content", "evidence-summary", "progress", "error")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class RunRecord:
    """One run as Delivery knows it (no private body)."""

    run_id: str
    account_id: str | None
    conversation_id: str | None
    message_id: str | None
    state: str | None
    outcome: str | None
    sequence: int
    closed: bool
    terminal: bool
    deleted: bool
    delivery: str
    """``pending`` | ``interrupted`` | ``completed`` (sticky once completed)."""
    last_frame_id: int
    first_seen: str
    reason: str | None = None


class DeliveryTables:
    """SQL shared by both recorders. ``{runs}``, ``{views}``, ``{frames}``, ``{conflicts}``
    are replaced by the (schema-qualified) table names; ``?`` is the placeholder."""

    prefix: str
    placeholder: str = "?"
    lock_suffix: str = ""

    def table_names(self) -> dict[str, str]:
        raise NotImplementedError

    def q(self, statement: str) -> str:
        statement = statement.format(**self.table_names())
        return statement.replace("?", self.placeholder) if self.placeholder != "?" else statement

    def ddl(self) -> list[str]:
        return [self.q(s) for s in (
            "CREATE TABLE IF NOT EXISTS {runs} ("
            " run_id TEXT PRIMARY KEY, account_id TEXT, conversation_id TEXT, state TEXT, outcome TEXT,"
            " last_frame_id BIGINT NOT NULL DEFAULT 0, terminal_frame_id BIGINT,"
            " delivery TEXT NOT NULL DEFAULT 'pending', deleted INTEGER NOT NULL DEFAULT 0,"
            " projection TEXT NOT NULL, first_seen TEXT NOT NULL, updated_at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {runs_index} ON {runs} (conversation_id)",
            "CREATE TABLE IF NOT EXISTS {views} ("
            " run_id TEXT PRIMARY KEY, state TEXT NOT NULL, view TEXT NOT NULL, updated_at TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS {frames} ("
            " run_id TEXT NOT NULL, frame_id BIGINT NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL,"
            " body_sha256 TEXT NOT NULL, skey TEXT, superseded INTEGER NOT NULL DEFAULT 0,"
            " created_at TEXT NOT NULL, PRIMARY KEY (run_id, frame_id))",
            "CREATE INDEX IF NOT EXISTS {frames_index} ON {frames} (run_id, skey)",
            "CREATE TABLE IF NOT EXISTS {conflicts} ("
            " run_id TEXT NOT NULL, block_id TEXT NOT NULL, revision BIGINT NOT NULL,"
            " first_kind TEXT NOT NULL, first_sha256 TEXT NOT NULL, second_kind TEXT NOT NULL,"
            " second_sha256 TEXT NOT NULL, frame_id BIGINT, detected_at TEXT NOT NULL)",
        )]

    # The recorders provide these (eventsourcing).
    def _insert_tracking(self, c: Any, tracking: Any) -> None: ...  # pragma: no cover
    def _max_tracking_id(self, application_name: str, c: Any) -> int | None: ...  # pragma: no cover

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Any]:
        with self.datastore.transaction(commit=commit) as c:  # type: ignore[attr-defined]
            yield c


class SQLiteDeliveryRecorder(SQLiteTrackingRecorder, DeliveryTables):
    prefix = "delivery"

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)

    def table_names(self) -> dict[str, str]:
        p = self.prefix
        return {"runs": f"{p}_runs", "views": f"{p}_views", "frames": f"{p}_frames",
                "conflicts": f"{p}_conflicts", "runs_index": f"{p}_runs_conversation",
                "frames_index": f"{p}_frames_key"}

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.ddl()]


class PostgresDeliveryRecorder(PostgresTrackingRecorder, DeliveryTables):
    placeholder = "%s"
    lock_suffix = " FOR UPDATE"

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str = "delivery_tracking",
                 **kwargs: Any) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.prefix = tracking_table_name.removesuffix("_tracking") or "delivery"
        if not _IDENT.match(self.prefix) or not _IDENT.match(self.datastore.schema):
            raise ValueError(f"unsafe table prefix or schema: {self.prefix!r} {self.datastore.schema!r}")
        self.sql_create_statements.extend(SQL(s) for s in self.ddl())  # type: ignore[arg-type]

    def table_names(self) -> dict[str, str]:
        s, p = self.datastore.schema, self.prefix
        return {"runs": f'"{s}"."{p}_runs"', "views": f'"{s}"."{p}_views"', "frames": f'"{s}"."{p}_frames"',
                "conflicts": f'"{s}"."{p}_conflicts"', "runs_index": f"{p}_runs_conversation",
                "frames_index": f"{p}_frames_key"}


ConflictListener = Callable[[merge.Conflict], None]


class ViewStore:
    """The delivery projection. Synchronous: call it from a worker thread in async code."""

    def __init__(self, settings: Settings, *, name: str = "delivery") -> None:
        if not _IDENT.match(name):
            raise ValueError(f"unsafe store name {name!r}")
        env = Environment(name=name, env=store_environment(settings, name))
        self._factory = InfrastructureFactory.construct(env)
        recorder_class = PostgresDeliveryRecorder if settings.uses_postgres else SQLiteDeliveryRecorder
        self.recorder: DeliveryTables = self._factory.tracking_recorder(recorder_class)  # type: ignore[arg-type]
        self.listeners: list[ConflictListener] = []

    def close(self) -> None:
        self._factory.close()

    # ------------------------------------------------------------------ writing

    def process(self, batch: Sequence[Inbound]) -> list[str]:
        """Apply a poll in one transaction with its tracking records. Returns the run ids
        that got new frames (poke the notifier with them after this returns)."""
        r = self.recorder
        fresh: list[Inbound] = []
        with r.transaction(commit=True) as c:
            positions: dict[str, int | None] = {}
            for item in batch:
                name = item.tracking.application_name
                if name not in positions:
                    positions[name] = r._max_tracking_id(name, c)
                recorded = positions[name]
                if recorded is not None and item.offset <= recorded:
                    continue  # redelivered: already applied with its frames
                positions[name] = item.offset
                fresh.append(item)
            # A run's closed record waits for the publication messages polled with it
            # (the topics are not ordered against each other).
            ordered = [i for i in fresh if not isinstance(i.message, RunClosed)]
            ordered += [i for i in fresh if isinstance(i.message, RunClosed)]
            conflicts: list[merge.Conflict] = []
            touched: dict[str, None] = {}
            cache: dict[str, _Loaded] = {}
            # Lock every run of the batch up front, in one order, so two consumers
            # sharing runs (publication and runs partitions) cannot deadlock.
            for run_id in sorted({r for r in (getattr(i.message, "run_id", None) for i in ordered) if r}):
                cache[run_id] = self._load(c, run_id, lock=True)
            for item in ordered:
                run_id = getattr(item.message, "run_id", None)
                if not run_id:
                    continue
                loaded = cache.get(run_id) or self._load(c, run_id, lock=True)
                cache[run_id] = loaded
                result = step(loaded.projection, item.message)
                loaded.dirty = True
                if result.purge_conversation is not None:
                    for other in cache.values():
                        self._save(c, other)
                    cache.clear()
                    self._purge(c, result.purge_conversation, loaded.projection.account_id)
                    continue
                if self._append(c, loaded, result.drafts, result.terminal, result.conflicts):
                    touched[run_id] = None
                for block_id in result.hidden_after_terminal:
                    self._strip(c, run_id, f"block:{block_id}", reason="withdrawn")
                conflicts.extend(result.conflicts)
            for loaded in cache.values():
                self._save(c, loaded)
            for name, offset in positions.items():
                if offset is not None and any(i.tracking.application_name == name for i in fresh):
                    r._insert_tracking(c, _tracking(name, offset))
        for conflict in conflicts:
            log.warning("protocol conflict", run_id=conflict.run_id, block_id=conflict.block_id,
                        revision=conflict.revision, first=conflict.first_kind, second=conflict.second_kind)
            for listener in self.listeners:
                listener(conflict)
        return list(touched)

    def record_delivery(self, run_id: str, outcome: str) -> None:
        """D4/D5: ``completed`` (sticky) or ``interrupted`` for the run's delivery."""
        if outcome not in ("completed", "interrupted"):
            raise ValueError(outcome)
        r = self.recorder
        with r.transaction(commit=True) as c:
            c.execute(r.q("UPDATE {runs} SET delivery = CASE WHEN delivery = 'completed' THEN 'completed' "
                          "ELSE ? END, updated_at = ? WHERE run_id = ?"), (outcome, _now(), run_id))

    def purge_conversation(self, conversation_id: str, account_id: str | None = None) -> list[str]:
        """X8: drop every private body of the conversation's runs (frames' markdown and
        text, answer text, views). Returns the purged run ids."""
        with self.recorder.transaction(commit=True) as c:
            return self._purge(c, conversation_id, account_id)

    # ------------------------------------------------------------------ reading

    def frames_after(self, run_id: str, last_id: int, limit: int = 1000) -> list[Frame]:
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? "
                          "AND frame_id > ? ORDER BY frame_id LIMIT ?"), (run_id, int(last_id), int(limit)))
            rows = c.fetchall()
        return [Frame(run_id, int(row["frame_id"]), row["event"], json.loads(row["data"]), row["body_sha256"])
                for row in rows]

    def run(self, run_id: str) -> RunRecord | None:
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT * FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return _record(row) if row is not None else None

    def answer_view(self, run_id: str) -> dict[str, Any] | None:
        """``{"blocks": [...in ordinal order, withdrawn omitted], "conflicts": [...]}``."""
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT view FROM {views} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return json.loads(row["view"]) if row is not None else None

    def history(self, conversation_id: str) -> list[RunRecord]:
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT * FROM {runs} WHERE conversation_id = ? ORDER BY first_seen, run_id"),
                      (conversation_id,))
            rows = c.fetchall()
        return [_record(row) for row in rows]

    def answer_text(self, run_id: str) -> str | None:
        """The closed record's answer text (private; gone after deletion)."""
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT projection FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return json.loads(row["projection"]).get("answer_text") if row is not None else None

    def conflicts(self, run_id: str) -> list[dict[str, Any]]:
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT * FROM {conflicts} WHERE run_id = ? ORDER BY detected_at"), (run_id,))
            return [dict(row) for row in c.fetchall()]

    def position(self, topic: str, partition: int) -> int | None:
        """The last Kafka offset applied for this topic partition (resume point)."""
        return self.recorder.max_tracking_id(f"{topic}#{partition}")  # type: ignore[attr-defined]

    def ping(self) -> bool:
        r = self.recorder
        with r.transaction(commit=False) as c:
            c.execute(r.q("SELECT COUNT(*) AS n FROM {runs} WHERE run_id = ?"), ("",))
            c.fetchone()
        return True

    # ------------------------------------------------------------------ internals

    def _load(self, c: Any, run_id: str, *, lock: bool) -> _Loaded:
        r = self.recorder
        c.execute(r.q("SELECT projection, last_frame_id FROM {runs} WHERE run_id = ?" + r.lock_suffix),
                  (run_id,))
        row = c.fetchone()
        if row is None:
            now = _now()
            projection = RunProjection.new(run_id)
            c.execute(r.q("INSERT INTO {runs} (run_id, projection, first_seen, updated_at) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT (run_id) DO NOTHING"),
                      (run_id, projection.model_dump_json(exclude={"answer"}), now, now))
            if lock and r.lock_suffix:
                return self._load(c, run_id, lock=lock)
            return _Loaded(projection, 0)
        data = json.loads(row["projection"])
        c.execute(r.q("SELECT state FROM {views} WHERE run_id = ?"), (run_id,))
        view_row = c.fetchone()
        answer = (merge.AnswerState.model_validate_json(view_row["state"]) if view_row is not None
                  else merge.AnswerState(run_id=run_id))
        return _Loaded(RunProjection.model_validate({**data, "answer": answer}), int(row["last_frame_id"]))

    def _save(self, c: Any, loaded: _Loaded) -> None:
        if not loaded.dirty:
            return
        r, p, now = self.recorder, loaded.projection, _now()
        c.execute(r.q("UPDATE {runs} SET account_id = ?, conversation_id = ?, state = ?, outcome = ?, "
                      "last_frame_id = ?, deleted = ?, projection = ?, updated_at = ? WHERE run_id = ?"),
                  (p.account_id, p.conversation_id, p.state, p.outcome, loaded.last_frame_id, int(p.deleted),
                   p.model_dump_json(exclude={"answer"}), now, p.run_id))
        view = {"blocks": merge.view(p.answer),
                "conflicts": [{"block_id": x.block_id, "revision": x.revision} for x in p.answer.conflicts]}
        c.execute(r.q("INSERT INTO {views} (run_id, state, view, updated_at) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, view = excluded.view, "
                      "updated_at = excluded.updated_at"),
                  (p.run_id, p.answer.model_dump_json(), json.dumps(view), now))
        loaded.dirty = False

    def _append(self, c: Any, loaded: _Loaded, drafts: list[FrameDraft], terminal: bool,
                conflicts: list[merge.Conflict]) -> bool:
        r, run_id = self.recorder, loaded.projection.run_id
        if not drafts and not terminal:
            return False
        error_frames: dict[tuple[str, int], int] = {}
        for draft in drafts:
            frame_id = self._insert_frame(c, loaded, draft)
            if draft.event == "error":
                error_frames[(draft.data["block_id"], draft.data["revision"])] = frame_id
        for conflict in conflicts:
            c.execute(r.q("INSERT INTO {conflicts} (run_id, block_id, revision, first_kind, first_sha256, "
                          "second_kind, second_sha256, frame_id, detected_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                      (run_id, conflict.block_id, conflict.revision, conflict.first_kind, conflict.first_sha256,
                       conflict.second_kind, conflict.second_sha256,
                       error_frames.get((conflict.block_id, conflict.revision)), _now()))
        if terminal:
            c.execute(r.q("SELECT frame_id, event, body_sha256 FROM {frames} WHERE run_id = ? ORDER BY frame_id"),
                      (run_id,))
            rows = c.fetchall()
            if any(row["event"] in (SUMMARY, DONE) for row in rows):
                raise AssertionError(f"run {run_id} already has a terminal frame")
            semantic = [(int(row["frame_id"]), row["body_sha256"]) for row in rows]
            held: list[tuple[int, str, Any]] = [(i, "x", {"body_sha256": h}) for i, h in semantic]
            for draft in terminal_drafts(semantic):
                frame_id = self._insert_frame(c, loaded, draft)
                held.append((frame_id, draft.event, draft.data))
            check = validate_stream(held)
            if not check.ok:  # never write a completion projection that a client would reject
                raise AssertionError(f"terminal of {run_id} does not validate: {check.problems}")
            c.execute(r.q("UPDATE {runs} SET terminal_frame_id = ? WHERE run_id = ?"),
                      (loaded.last_frame_id, run_id))
        return True

    def _insert_frame(self, c: Any, loaded: _Loaded, draft: FrameDraft) -> int:
        r, run_id = self.recorder, loaded.projection.run_id
        loaded.last_frame_id += 1
        frame_id = loaded.last_frame_id
        if draft.key is not None:
            self._strip(c, run_id, draft.key, reason="superseded", before=frame_id)
        c.execute(r.q("INSERT INTO {frames} (run_id, frame_id, event, data, body_sha256, skey, created_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)"),
                  (run_id, frame_id, draft.event, json.dumps(draft.data, ensure_ascii=False), draft.body_sha256,
                   draft.key, _now()))
        return frame_id

    def _strip(self, c: Any, run_id: str, key: str, *, reason: str, before: int | None = None) -> None:
        """Replace the bodies of a key's frames with skeletons (ids and hashes stay)."""
        r = self.recorder
        query = "SELECT frame_id, event, data, body_sha256 FROM {frames} WHERE run_id = ? AND skey = ?"
        params: tuple[Any, ...] = (run_id, key)
        if before is not None:
            query += " AND superseded = 0 AND frame_id < ?"
            params += (before,)
        c.execute(r.q(query), params)
        for row in c.fetchall():
            data = skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason=reason)
            c.execute(r.q("UPDATE {frames} SET data = ?, superseded = 1 WHERE run_id = ? AND frame_id = ?"),
                      (json.dumps(data, ensure_ascii=False), run_id, row["frame_id"]))

    def _purge(self, c: Any, conversation_id: str, account_id: str | None) -> list[str]:
        r = self.recorder
        query = "SELECT run_id FROM {runs} WHERE conversation_id = ?"
        params: tuple[Any, ...] = (conversation_id,)
        if account_id is not None:
            query += " AND account_id = ?"
            params += (account_id,)
        c.execute(r.q(query), params)
        run_ids = [row["run_id"] for row in c.fetchall()]
        marks = ", ".join("?" for _ in PRIVATE_FRAME_EVENTS)
        for run_id in run_ids:
            loaded = self._load(c, run_id, lock=True)
            p = loaded.projection
            p.deleted = True
            p.answer_text = None
            p.evidence = []
            p.answer = merge.AnswerState(run_id=run_id)
            loaded.dirty = True
            self._save(c, loaded)
            c.execute(r.q(f"SELECT frame_id, event, data, body_sha256 FROM {{frames}} WHERE run_id = ? "
                          f"AND event IN ({marks})"), (run_id, *PRIVATE_FRAME_EVENTS))
            for row in c.fetchall():
                data = skeleton(row["event"], json.loads(row["data"]), row["body_sha256"], reason="purged")
                c.execute(r.q("UPDATE {frames} SET data = ?, superseded = 1 WHERE run_id = ? AND frame_id = ?"),
                          (json.dumps(data), run_id, row["frame_id"]))
        if run_ids:
            log.info("conversation purged", conversation_id=conversation_id, runs=len(run_ids))
        return run_ids


@dataclass
class _Loaded:
    projection: RunProjection
    last_frame_id: int
    dirty: bool = False


def _tracking(name: str, offset: int) -> Any:
    from eventsourcing.persistence import Tracking

    return Tracking(application_name=name, notification_id=offset)


def _record(row: Any) -> RunRecord:
    data = json.loads(row["projection"])
    return RunRecord(
        run_id=row["run_id"], account_id=row["account_id"], conversation_id=row["conversation_id"],
        message_id=data.get("message_id"), state=row["state"], outcome=row["outcome"],
        sequence=int(data.get("sequence") or 0), closed=bool(data.get("closed")),
        terminal=bool(data.get("terminal")), deleted=bool(row["deleted"]), delivery=row["delivery"],
        last_frame_id=int(row["last_frame_id"]), first_seen=row["first_seen"], reason=data.get("reason"),
    )

"""Delivery's view store: the projection of ``imprint.publication.v1`` and
``imprint.runs.v1`` that every client is served from, on the deployment's backend.

* **Writing** a poll is the tracked unit of work over the view tables
  (:mod:`services.delivery.view_sink`, the D rules in :mod:`imprint.delivery.handling`):
  frames with per-run ids (D1), each block's merged state, and the Kafka positions, in
  one transaction.
* **Reading** is here: a run's frames after a position (a new or resuming client), the
  live feeds' read after a wake-up, the answer, history and execution views.
* Stream tickets (D6) and delivery outcomes (D4, D5) are small writes of their own.
* D7: a conversation's notices as live feeds (:mod:`services.delivery.notices`) and what
  clients reported rendered and received (:mod:`services.delivery.seen_store`); D9: the
  conversation stream, a live feed of the same kind.

The tables and their SQL are :mod:`services.delivery.view_tables`. Synchronous: call
it from a worker thread in async code."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Tracer

from imprint.delivery import merge
from imprint.delivery.conversation import ConversationView, fold
from imprint.delivery.feeds import conversation_feed, notice_feed
from imprint.delivery.frames import Frame
from services.common.backends import backend_for
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.common.unit_of_work import Recorded, Redelivered, TrackedUnitOfWork
from services.delivery.notices import ENTRIES, NoticeFeeds
from services.delivery.notifier import FeedRead
from services.delivery.seen_store import SeenStore
from services.delivery.sse import read_back
from services.delivery.hot_runs import HotRuns
from services.delivery.view_sink import NOTHING_COMMITTED, Committed, ViewSink, applying, notify_payloads
from services.delivery.view_workspace import now, purge
from services.delivery.view_tables import ViewTables
from services.delivery.view_upgrade import upgrade


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


class ViewStore:
    """The delivery projection of one deployment (shared by its instances where the backend allows)."""

    def __init__(self, settings: Settings, *, name: str = "delivery", tracer: Tracer | None = None) -> None:
        """``tracer`` (tracing on): a span per message applied, its ``traceparent`` kept with
        the frames it appends and read back with them by the live feeds."""
        self.tables = backend_for(settings).tables(name, tracking=True)
        self.views = ViewTables(self.tables)
        upgrade(self.views)
        self.origin = uuid.uuid4().hex
        """Names this process in its own notifications (it wakes its feeds directly)."""
        self.tracer = tracer
        self.sink = ViewSink(self.views, self.origin, hot_state_bytes=settings.hot_state_bytes,
                             traced=tracer is not None)
        self.applying = applying(tracer)
        """The poll's policy: the one loop over :mod:`imprint.delivery.handling`."""
        self.units = TrackedUnitOfWork()
        self.notices = NoticeFeeds(self.views)
        """D7: the conversations' notices, read as live feeds."""
        self.conversations = NoticeFeeds(self.views, ENTRIES)
        """D9: the conversations' streams (turns and notices), read as live feeds."""
        self.sightings = SeenStore(self.views)
        """D7: what clients reported rendered and received, and the "who saw it" report."""

    def close(self) -> None:
        self.tables.close()

    @property
    def listeners(self) -> list[Any]:
        """Called with each protocol conflict (P17) once its poll committed."""
        return self.sink.listeners

    @property
    def hot(self) -> HotRuns:
        return self.sink.hot

    # ------------------------------------------------------------------ writing

    def commit(self, batch: Sequence[Inbound]) -> Committed:
        """Apply a poll in one transaction with its tracking records. Returns what it
        committed: every live feed the poll changed — the runs whose streams have new frames
        or were deleted, and the conversations' notices (D7,
        :func:`~services.delivery.view_tables.notice_feed`) — and the frames it appended:
        hand both to this process's feeds after this returns (:meth:`Notifier.notify
        <services.delivery.notifier.Notifier.notify>`); other instances hear the poll's
        notification and read the store."""
        outcome = self.units.run(batch, self.applying, self.sink)
        match outcome:
            case Recorded(committed):
                return committed
            case Redelivered():
                return NOTHING_COMMITTED
            case _:  # unconfirmed or refused: the poll is retried; its positions make it idempotent
                raise outcome.error  # type: ignore[union-attr]

    def process(self, batch: Sequence[Inbound]) -> list[str]:
        """:meth:`commit`, for a caller that wakes the feeds it changed (they read the store)."""
        return self.commit(batch).feeds

    # --- stream tickets (D6), shared by every Delivery instance ----------------------------

    def issue_ticket(self, digest: str, account_id: str, run_id: str, expires_at: float) -> None:
        """Hold a stream ticket's hash for (account, run) until ``expires_at`` (epoch seconds)."""
        r = self.views
        with self.tables.transaction(commit=True) as c:
            c.execute(r.q("DELETE FROM {tickets} WHERE expires_at <= ?"), (expires_at - 3600,))
            c.execute(r.q("INSERT INTO {tickets} (digest, account_id, run_id, expires_at) VALUES (?, ?, ?, ?)"),
                      (digest, account_id, run_id, expires_at))

    def use_ticket(self, digest: str, run_id: str, now: float, ttl: float) -> str | None:
        """The account of a live ticket for ``run_id``; each use extends its life by ``ttl``."""
        r = self.views
        with self.tables.transaction(commit=True) as c:
            # One statement that both extends the ticket and names its account: the cursors
            # of both backends return rows, and neither need expose a row count.
            c.execute(r.q("UPDATE {tickets} SET expires_at = ? WHERE digest = ? AND run_id = ? AND expires_at > ? "
                          "RETURNING account_id"), (now + ttl, digest, run_id, now))
            row = c.fetchone()
        return None if row is None else row["account_id"]

    def record_delivery(self, run_id: str, outcome: str) -> None:
        """D4/D5: ``completed`` (sticky) or ``interrupted`` for the run's delivery."""
        self.record_deliveries({run_id: outcome})

    def record_deliveries(self, outcomes: Mapping[str, str]) -> None:
        """D4/D5: the delivery outcome of several runs, in one transaction; ``completed``
        stays ``completed`` whatever is recorded after it."""
        for outcome in outcomes.values():
            if outcome not in ("completed", "interrupted"):
                raise ValueError(outcome)
        stamp = now()
        with self.tables.transaction(commit=True) as c:
            c.executemany(self.views.q("UPDATE {runs} SET delivery = CASE WHEN delivery = 'completed' "
                                       "THEN 'completed' ELSE ? END, updated_at = ? WHERE run_id = ?"),
                          [(outcome, stamp, run_id) for run_id, outcome in sorted(outcomes.items())])

    def purge_conversation(self, conversation_id: str, account_id: str | None = None) -> list[str]:
        """X8: drop every private body of the conversation's runs (frames' markdown and
        text, answer text, block states). Returns the purged run ids."""
        with self.tables.transaction(commit=True) as c:
            purged = purge(self.views, c, conversation_id, account_id)
            feeds = [*purged, notice_feed(conversation_id), conversation_feed(conversation_id)] if purged else []
            for payload in notify_payloads(self.origin, feeds):
                self.tables.notify(c, payload)
        for run_id in purged:
            self.hot.drop(run_id)
        return purged

    # ------------------------------------------------------------------ reading

    def frames_after(self, run_id: str, last_id: int, limit: int = 1000) -> list[Frame]:
        with self.tables.reading() as c:
            return self._frames_after(c, run_id, last_id, limit)

    def read_feeds(self, cursors: Mapping[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        """The live feeds' read after a wake-up, for every woken run at once: each run's
        frames after its cursor (at most ``limit``), then the runs' states. A batch that
        touched fifty followed runs costs one read, not fifty (on PostgreSQL two
        statements: one for every run's frames, one for their states). Tracing on, each frame
        comes with its ``traceparent``: the feed's send of it continues that trace."""
        ids = list(cursors)
        frames: dict[str, list[Frame]] = {run_id: [] for run_id in ids}
        traced = self.tracer is not None
        framed = _traced_frame if traced else _frame
        with self.tables.reading() as c:
            for row in self.views.frames_after(c, {run_id: int(cursors[run_id]) for run_id in ids}, int(limit),
                                               traced=traced):
                frames[row["run_id"]].append(framed(row))
            found = self.views.run_rows(c, ids, "run_id, deleted, terminal_frame_id, last_frame_id")
        reads: dict[str, FeedRead] = {}
        for run_id in ids:
            row = found.get(run_id)
            reads[run_id] = (
                FeedRead(frames[run_id], exists=False, deleted=False, terminal=False, last_frame_id=0) if row is None
                else FeedRead(frames[run_id], exists=True, deleted=bool(row["deleted"]),
                              terminal=row["terminal_frame_id"] is not None, last_frame_id=int(row["last_frame_id"])))
        return reads

    def heads(self, run_ids: Sequence[str]) -> dict[str, tuple[int, bool]]:
        """``{run_id: (last_frame_id, deleted)}`` of the given runs, in one query (the
        feeds' fallback check when no wake-up arrived)."""
        if not run_ids:
            return {}
        with self.tables.reading() as c:
            rows = self.views.run_rows(c, list(run_ids), "run_id, last_frame_id, deleted")
        return {run_id: (int(row["last_frame_id"]), bool(row["deleted"])) for run_id, row in rows.items()}

    def run(self, run_id: str) -> RunRecord | None:
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT * FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return _record(row) if row is not None else None

    def answer_view(self, run_id: str) -> dict[str, Any] | None:
        """``{"blocks": [...in ordinal order, withdrawn omitted], "conflicts": [...]}``."""
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT deleted FROM {runs} WHERE run_id = ?"), (run_id,))
            run = c.fetchone()
            if run is None:
                return None
            if run["deleted"]:
                return {"blocks": [], "conflicts": []}
            c.execute(self.views.q("SELECT state FROM {blocks} WHERE run_id = ?"), (run_id,))
            states = [row["state"] for row in c.fetchall()]
            c.execute(self.views.q("SELECT block_id, revision FROM {conflicts} WHERE run_id = ? ORDER BY seq"), (run_id,))
            conflicts = [{"block_id": row["block_id"], "revision": int(row["revision"])} for row in c.fetchall()]
        shown = (merge.display(merge.BlockState.model_validate_json(state)) for state in states)
        blocks = sorted((entry for entry in shown if entry is not None),
                        key=lambda e: (e["delivery_ordinal"], e["block_id"]))
        return {"blocks": blocks, "conflicts": conflicts}

    def kept_blocks(self, run_id: str) -> dict[str, Any]:
        """X11: the committed block revisions Delivery holds for the run now (what a stop
        requested now keeps, :func:`imprint.delivery.merge.kept`), in display order, with
        ``as_of_event_id``: the run's last frame id, read first, so every revision published
        in a frame up to it is among them."""
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT last_frame_id, deleted FROM {runs} WHERE run_id = ?"), (run_id,))
            run = c.fetchone()
            if run is None or run["deleted"]:
                return {"as_of_event_id": int(run["last_frame_id"]) if run else 0, "blocks": []}
            c.execute(self.views.q("SELECT state FROM {blocks} WHERE run_id = ?"), (run_id,))
            states = [row["state"] for row in c.fetchall()]
        blocks = (merge.kept(merge.BlockState.model_validate_json(state)) for state in states)
        return {"as_of_event_id": int(run["last_frame_id"]),
                "blocks": sorted((b for b in blocks if b is not None),
                                 key=lambda b: (b["delivery_ordinal"], b["block_id"]))}

    def owns_conversation(self, conversation_id: str, account_id: str) -> bool:
        """Whether the account has a run in the conversation that was not deleted (D6, D7)."""
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT run_id FROM {runs} WHERE conversation_id = ? AND account_id = ? "
                                   "AND deleted = 0 LIMIT 1"), (conversation_id, account_id))
            return c.fetchone() is not None

    def conversation_view(self, conversation_id: str) -> ConversationView:
        """D9: the conversation's stream folded as a tab folds it (its questions and queue)."""
        view = ConversationView()
        feed = conversation_feed(conversation_id)
        while True:
            frames = self.conversations.frames_after(feed, view.last_entry_id, 1000)
            fold(((f.id, f.event, f.data) for f in frames), view)
            if len(frames) < 1000:
                return view

    def history(self, conversation_id: str) -> list[RunRecord]:
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT * FROM {runs} WHERE conversation_id = ? ORDER BY first_seen, run_id"),
                      (conversation_id,))
            rows = c.fetchall()
        return [_record(row) for row in rows]

    def answer_text(self, run_id: str) -> str | None:
        """The closed record's answer text (private; gone after deletion)."""
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT projection FROM {runs} WHERE run_id = ?"), (run_id,))
            row = c.fetchone()
        return json.loads(row["projection"]).get("answer_text") if row is not None else None

    def seen(self, run_id: str) -> dict[str, Any] | None:
        """D7: who saw each withdrawn block revision of the run (``None``: no such run)."""
        return self.sightings.report(run_id)

    def conflicts(self, run_id: str) -> list[dict[str, Any]]:
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT * FROM {conflicts} WHERE run_id = ? ORDER BY seq"), (run_id,))
            return [dict(row) for row in c.fetchall()]

    def position(self, topic: str, partition: int) -> int | None:
        """The last Kafka offset applied for this topic partition (resume point)."""
        return self.tables.max_position(f"{topic}#{partition}")

    def ping(self) -> bool:
        with self.tables.reading() as c:
            c.execute(self.views.q("SELECT COUNT(*) AS n FROM {runs} WHERE run_id = ?"), ("",))
            c.fetchone()
        return True

    def _frames_after(self, c: Any, run_id: str, last_id: int, limit: int) -> list[Frame]:
        return [_frame(row) for row in self.views.frames_after(c, {run_id: int(last_id)}, int(limit))]


def _frame(row: Any) -> Frame:
    """A frame read back (:func:`~services.delivery.sse.read_back`): its stored JSON kept to be
    sent as it is, never parsed and encoded again, its SSE event made once for every client."""
    return read_back(row["run_id"], int(row["frame_id"]), row["event"], row["data"], row["body_sha256"])


def _traced_frame(row: Any) -> Frame:
    """A frame read back with the ``traceparent`` it was stored with (tracing on)."""
    return read_back(row["run_id"], int(row["frame_id"]), row["event"], row["data"], row["body_sha256"],
                     row["traceparent"])


def _record(row: Any) -> RunRecord:
    data = json.loads(row["projection"])
    return RunRecord(
        run_id=row["run_id"], account_id=row["account_id"], conversation_id=row["conversation_id"],
        message_id=data.get("message_id"), state=row["state"], outcome=row["outcome"],
        sequence=int(data.get("sequence") or 0), closed=bool(data.get("closed")),
        terminal=bool(data.get("terminal")), deleted=bool(row["deleted"]), delivery=row["delivery"],
        last_frame_id=int(row["last_frame_id"]), first_seen=row["first_seen"], reason=data.get("reason"),
    )

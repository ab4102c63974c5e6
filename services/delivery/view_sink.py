"""Delivery's view tables as the sink of the tracked unit of work, and the poll's policy: the
one loop (:class:`services.common.dispatch.Dispatch`) over :mod:`imprint.delivery.handling`.

One poll is one transaction (:mod:`services.common.unit_of_work`): the partitions'
positions are locked and read, the pure handling appends frames through a
:class:`~services.delivery.view_workspace.ViewWorkspace`, and every changed row is written
with the positions. A redelivered message (its offset is already tracked) changes nothing and
appends no frame; a restart loses neither views nor resume positions.

**Several instances.** The instances form one consumer group over one shared store.
During a rebalance the old and the new owner of a partition may apply overlapping polls
at the same moment: a transaction-scoped lock per partition, taken before the position
is read, makes the second wait and then skip what the first committed. The poll's
transaction announces the runs it changed on the tables' channel (where the backend
has one), so every instance wakes its live feeds.

**Traces** (X9: ids only). With a tracer, each message is applied in a ``delivery apply``
span under the context its record carried, with its ids and the first frame id it was
given; the frames keep the span's ``traceparent`` (:class:`imprint.delivery.handling.Context`),
so whichever instance sends them continues the trace."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import Tracking
from opentelemetry.trace import Tracer

from imprint.delivery import handling, merge
from imprint.delivery.frames import Frame
from imprint.delivery.handling import Context, Effects
from imprint.delivery.rows import FRAME_ROW
from imprint.runtime import tracecontext
from services.common.dispatch import Dispatch, Handled, Spans
from services.common.inbound import Inbound
from services.common.observability import get_logger
from services.delivery.hot_runs import HotRuns
from services.delivery.sse import read_back
from services.delivery.view_tables import ViewTables
from services.delivery.view_workspace import TracedWorkspace, ViewWorkspace

log = get_logger(__name__)

NOTIFY_PAYLOAD_BYTES = 7000
"""PostgreSQL caps a notification's payload at 8000 bytes; run ids are packed below that."""

ConflictListener = Callable[[merge.Conflict], None]

RUN_ID, FRAME_ID, EVENT, DATA, BODY_SHA256 = (FRAME_ROW.index(column) for column in
                                              ("run_id", "frame_id", "event", "data", "body_sha256"))
TRACEPARENT = len(FRAME_ROW)
"""Where a traced poll's frame row keeps the ``traceparent`` (after :data:`FRAME_ROW`)."""


def notify_payloads(origin: str, run_ids: Sequence[str]) -> list[str]:
    """``{"origin": …, "runs": [...]}`` payloads, each under PostgreSQL's size cap."""
    payloads: list[str] = []
    chunk: list[str] = []
    size = 0
    for run_id in run_ids:
        cost = len(json.dumps(run_id)) + 1
        if chunk and size + cost > NOTIFY_PAYLOAD_BYTES:
            payloads.append(json.dumps({"origin": origin, "runs": chunk}))
            chunk, size = [], 0
        chunk.append(run_id)
        size += cost
    if chunk:
        payloads.append(json.dumps({"origin": origin, "runs": chunk}))
    return payloads


@dataclass
class ViewUnit:
    """One poll's unit on the view tables: the positions read under their locks and the workspace."""

    positions: dict[str, int]
    workspace: ViewWorkspace
    sink: ViewSink

    def record(self, trackings: Sequence[Tracking]) -> None:
        """The poll's writes and its notification sent together (one statement where the
        backend allows: :meth:`~services.common.tables.Tables.together`), then its positions."""
        ws, tables = self.workspace, self.sink.views.tables
        with tables.together(ws.c) as writes:
            ws.flush(writes=writes)
            for payload in notify_payloads(self.sink.origin, list(ws.touched)):
                tables.notify(writes, payload)
        tables.record_positions(ws.c, trackings)


class ViewSink:
    """The view tables as the sink of Delivery's tracked unit of work."""

    def __init__(self, views: ViewTables, origin: str, *, hot_state_bytes: int, traced: bool = False) -> None:
        self.views = views
        self.origin = origin
        """Names this process in its notifications (its own consumer wakes its feeds)."""
        self.workspace = TracedWorkspace if traced else ViewWorkspace
        self.hot = HotRuns(hot_state_bytes)
        self.listeners: list[ConflictListener] = []

    @contextmanager
    def unit(self, names: Sequence[str]) -> Iterator[ViewUnit]:
        tables = self.views.tables
        with tables.writing() as c:
            tables.lock(c, names)
            recorded = tables.read_positions(c, names)
            unit = ViewUnit({name: -1 if position is None else position for name, position in recorded.items()},
                            self.workspace.of(self.views, self.hot, c), self)
            yield unit
        ws = unit.workspace
        self.hot.keep(ws.runs.values())  # committed: these copies are the stored rows now
        for conflict in ws.conflicts:
            log.warning("protocol conflict", run_id=conflict.run_id, block_id=conflict.block_id,
                        revision=conflict.revision, first=conflict.first_kind, second=conflict.second_kind)
            for listener in self.listeners:
                listener(conflict)

    def recorded(self, tracking: Tracking) -> bool:
        position = self.views.tables.max_position(tracking.application_name)
        return position is not None and position >= tracking.notification_id


APPLY: Spans[Effects] = Spans("delivery apply", lambda message: message.trace_ids(),
                              lambda effects: {"frame_id": effects.frames[0]} if effects.frames else {})
"""Every message of a traced poll in a span of its own, with its ids and its first frame's id."""


def _untraced(item: Inbound) -> Context:
    return UNTRACED


def _traced(item: Inbound) -> Context:
    return Context(tracecontext.traceparent())  # made in the message's span: its frames keep it


UNTRACED = Context()


@dataclass(frozen=True)
class Committed:
    """What a poll committed, for its own process's live feeds (:meth:`Notifier.notify
    <services.delivery.notifier.Notifier.notify>`): the feeds it changed, and the frames it
    appended to each run, handed over in memory rather than read back.

    The rows are the ones the poll wrote, as it wrote them (:attr:`PollRows.appended
    <imprint.delivery.rows.PollRows.appended>`), so a frame is made of the same text the store
    holds, by the same :func:`~services.delivery.sse.read_back`: the bytes a client gets do not
    depend on which path brought them. A run whose stored frames the poll rewrote behind its
    rows (a strip after the terminal, a purge) hands nothing over: its feeds read the store."""

    feeds: list[str]
    rows: dict[str, list[list[Any]]]
    traced: bool = False

    def frames(self, key: str) -> list[Frame] | None:
        """The frames the poll appended to the run ``key``, in id order (``None``: nothing handed
        over, the feed reads the store)."""
        rows = self.rows.get(key)
        if rows is None:
            return None
        return [read_back(row[RUN_ID], row[FRAME_ID], row[EVENT], row[DATA], row[BODY_SHA256],
                          row[TRACEPARENT] if self.traced else None) for row in rows]


NOTHING_COMMITTED = Committed([], {})


def _committed(ws: ViewWorkspace, handled: list[Handled[Effects]]) -> Committed:
    """The live feeds the poll changed and the frames it appended (handed on after the commit)."""
    rows = {run_id: appended for run_id, appended in ws.appended.items() if run_id not in ws.rewritten}
    return Committed(list(ws.touched), rows, ws.keeps_trace)


def applying(tracer: Tracer | None) -> Dispatch[ViewWorkspace, Context, Effects, Committed]:
    """Delivery's policy over a poll; its result is what it committed for the live feeds.
    Nothing leaves Delivery before its commit."""
    context = _untraced if tracer is None else _traced
    return Dispatch(handling, lambda fresh: context, _committed, tracer=tracer, spans=APPLY)  # type: ignore[arg-type]

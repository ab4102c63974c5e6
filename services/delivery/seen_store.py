"""D7: what Delivery keeps of client receipts to say who saw a withdrawn claim, and the
report it reads back (the fold is :mod:`imprint.delivery.seen`).

**Why Delivery's own tables, written when it accepts the receipt.** The receipt route
is where a client's report is authenticated and checked against the run's account and
frames; the same store holds the withdrawals (the run's frames, the conversation's
notices), so the report is one read of one store, consistent with what Delivery told the
clients. ``imprint.delivery.v1`` stays the announcement of each receipt, for whoever
audits the stream; but a topic's retention would end the audit of a withdrawal with it,
and a consumer of that topic on Delivery's poll would decode every ``delivery.sent`` of
every connection (a thousand clients of a run, thousands of messages) to keep a few rows,
and the report would lag the 202 the client got.

Each receipt adds at most one row per (run, block revision, client) rendered, one per
(run, notice, client) received, and moves one position per (run, client): a client that
reports the same again changes nothing, so a retried receipt is harmless. Receipts that
arrive together are written in one transaction (:class:`services.delivery.observer.GroupCommit`).
Nothing private is kept: ids, revisions, positions and times."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imprint.delivery import seen
from imprint.delivery.frames import WITHDRAWN
from services.delivery.view_tables import RENDER_COLUMNS, ViewTables

UNNAMED = ""
"""How a client that did not name itself is stored (it is reported as ``None``). Such clients
cannot be told apart: their renders of one block revision are one row, the first time."""
UNKNOWN_REVISION = 0
"""How a render whose revision the client did not say is stored (revisions start at 1)."""


@dataclass(frozen=True)
class ClientReport:
    """What D7 keeps of one accepted receipt."""

    run_id: str
    kind: str
    """``client.received`` | ``client.rendered`` (a conflict report keeps nothing here)."""
    client_id: str | None
    last_event_id: int
    at: str
    revisions: Mapping[str, int | None] = field(default_factory=dict)
    """The blocks it names → the revision it says it shows (``None``: not said)."""
    notice_ids: Sequence[int] = ()


class SeenStore:
    def __init__(self, views: ViewTables) -> None:
        self.views = views
        self.tables = views.tables

    def record(self, reports: Sequence[ClientReport]) -> None:
        """Keep these receipts' sightings, in one transaction."""
        renders: dict[tuple[str, str, int, str], str] = {}
        positions: dict[tuple[str, str], tuple[int, str]] = {}
        acks: list[ClientReport] = []
        for r in reports:
            client = r.client_id or UNNAMED
            if r.kind == "client.rendered":
                for block_id, revision in r.revisions.items():
                    key = (r.run_id, block_id, revision or UNKNOWN_REVISION, client)
                    renders[key] = min(renders.get(key, r.at), r.at)
            elif r.kind == "client.received" and r.client_id:
                held = positions.get((r.run_id, client))
                if held is None or r.last_event_id > held[0]:
                    positions[(r.run_id, client)] = (r.last_event_id, r.at)
                if r.notice_ids:
                    acks.append(r)
        if not (renders or positions or acks):
            return
        v = self.views
        with self.tables.transaction(commit=True) as c:
            if renders:
                v.insert_rows(c, "{renders}", RENDER_COLUMNS, [(*key, at) for key, at in sorted(renders.items())],
                              " ON CONFLICT (run_id, block_id, revision, client_id) DO NOTHING")
            if positions:
                v.insert_rows(c, "{received} AS t", ("run_id", "client_id", "last_event_id", "received_at"),
                              [(run, client, last, at) for (run, client), (last, at) in sorted(positions.items())],
                              " ON CONFLICT (run_id, client_id) DO UPDATE SET last_event_id = excluded.last_event_id,"
                              " received_at = excluded.received_at WHERE excluded.last_event_id > t.last_event_id")
            for r in acks:  # only notices of this run are acknowledged (a notice id is per conversation)
                ids = sorted(set(r.notice_ids))
                marks = ", ".join("?" for _ in ids)
                c.execute(v.q(f"INSERT INTO {{notice_receipts}} (run_id, notice_id, client_id, received_at) "
                              f"SELECT n.run_id, n.notice_id, ?, ? FROM {{notices}} n WHERE n.run_id = ? "
                              f"AND n.notice_id IN ({marks}) ON CONFLICT (run_id, notice_id, client_id) DO NOTHING"),
                          (r.client_id, r.at, r.run_id, *ids))

    def report(self, run_id: str) -> dict[str, Any] | None:
        """The run's "who saw it" report (:func:`imprint.delivery.seen.report`), ``None`` for
        a run Delivery never heard of."""
        v = self.views
        with self.tables.reading() as c:
            c.execute(v.q("SELECT conversation_id FROM {runs} WHERE run_id = ?"), (run_id,))
            run = c.fetchone()
            if run is None:
                return None
            c.execute(v.q("SELECT frame_id, data, created_at FROM {frames} WHERE run_id = ? AND event = ? "
                          "ORDER BY frame_id"), (run_id, WITHDRAWN))
            framed = c.fetchall()
            c.execute(v.q("SELECT notice_id, block_id, revision, cause, created_at FROM {notices} WHERE run_id = ? "
                          "ORDER BY notice_id"), (run_id,))
            noticed = c.fetchall()
            c.execute(v.q("SELECT block_id, revision, client_id, rendered_at FROM {renders} WHERE run_id = ?"),
                      (run_id,))
            rendered = c.fetchall()
            c.execute(v.q("SELECT client_id, last_event_id, received_at FROM {received} WHERE run_id = ?"), (run_id,))
            received = c.fetchall()
            c.execute(v.q("SELECT notice_id, client_id, received_at FROM {notice_receipts} WHERE run_id = ?"),
                      (run_id,))
            acked = c.fetchall()
        withdrawals = [_framed(run_id, row) for row in framed]
        withdrawals += [seen.Withdrawal(run_id, row["block_id"], int(row["revision"]), row["cause"], row["created_at"],
                                        notice_id=int(row["notice_id"])) for row in noticed]
        renders = [seen.Render(row["block_id"], int(row["revision"]) or None, row["client_id"] or None,
                               row["rendered_at"]) for row in rendered]
        positions = [seen.Position(row["client_id"], int(row["last_event_id"]), row["received_at"]) for row in received]
        acks = {(int(row["notice_id"]), row["client_id"]): row["received_at"] for row in acked}
        return {**seen.report(run_id, [w for w in withdrawals if w is not None], renders, positions, acks),
                "conversation_id": run["conversation_id"]}


def _framed(run_id: str, row: Any) -> seen.Withdrawal | None:
    """A withdrawal the run's stream carried (its ``answer-withdrawn`` frame; a skeleton
    since, when the block was shown again or purged, keeps its block and revision)."""
    data = json.loads(row["data"])
    if not isinstance(data, dict) or not data.get("block_id"):
        return None
    revision = data.get("revision")
    return seen.Withdrawal(run_id, str(data["block_id"]), int(revision) if revision is not None else None,
                           str(data.get("cause") or "withdrawn"), row["created_at"], frame_id=int(row["frame_id"]))

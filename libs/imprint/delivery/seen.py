"""D7: who saw a withdrawn claim — for each withdrawn block revision of a run, the clients
that reported it rendered (D4), when, and whether each has since received the withdrawal.

The facts are kept apart and only put side by side here:

* a **withdrawal** Delivery carried: before the run's ``done`` as an ``answer-withdrawn``
  frame of the run's stream (``frame_id``), after it as a notice of the conversation
  (``notice_id``, :mod:`imprint.delivery.notices`);
* a **render**: a client's ``client.rendered`` receipt named the block (and the revision
  it showed, when the client says so; a client that does not reads as revision unknown);
* a **receipt of the withdrawal**: for a notice, the client's receipt naming the notice
  id; for a frame, a ``client.received`` receipt of that client whose ``last_event_id``
  covers the frame (the receipt's time is then when it was known received, at the latest).

A client is whoever names itself with a ``client_id`` on its receipts (the reference page:
one per page load). A render from a client without one is listed, but whether it received
the withdrawal is unknown (``None``), never assumed either way. A render of a revision
newer than the withdrawn one is not a sighting of the withdrawn claim.

Everything here is ids, revisions, causes and times: no title, no body, no source (D6).
Pure: the store reads the rows, :func:`report` folds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Withdrawal:
    run_id: str
    block_id: str
    revision: int | None
    cause: str
    at: str
    frame_id: int | None = None
    """Told in the run's stream (before ``done``)."""
    notice_id: int | None = None
    """Told as a notice of the conversation (after ``done``)."""


@dataclass(frozen=True, slots=True)
class Render:
    block_id: str
    revision: int | None
    """``None``: the client did not say which revision it showed."""
    client_id: str | None
    at: str
    """When the client first reported this revision rendered."""


@dataclass(frozen=True, slots=True)
class Position:
    """How far a client reported the run's stream received."""

    client_id: str
    last_event_id: int
    at: str


def report(run_id: str, withdrawals: Iterable[Withdrawal], renders: Iterable[Render],
           positions: Iterable[Position], notice_receipts: Mapping[tuple[int, str], str]) -> dict[str, Any]:
    """The run's report: one entry per withdrawal, in the order they were told, each with
    the clients that rendered the withdrawn claim; ``outstanding`` counts the sightings whose
    client has not received the withdrawal, ``unknown`` those of clients that never named
    themselves. ``notice_receipts``: (notice id, client id) → when the client reported the
    notice received."""
    by_block: dict[str, list[Render]] = {}
    for render in renders:
        by_block.setdefault(render.block_id, []).append(render)
    received_to = {p.client_id: p for p in positions}
    entries: list[dict[str, Any]] = []
    for w in sorted(withdrawals, key=lambda w: (w.at, w.frame_id or 0, w.notice_id or 0)):
        seen_by = []
        for render in sorted(by_block.get(w.block_id, ()), key=lambda r: (r.at, r.client_id or "", r.revision or 0)):
            if w.revision is not None and render.revision is not None and render.revision > w.revision:
                continue  # a newer revision was shown: not the withdrawn claim
            received, at = _received(w, render.client_id, received_to, notice_receipts)
            seen_by.append({"client_id": render.client_id, "revision": render.revision,
                            "rendered_at": render.at, "received_withdrawal": received, "received_at": at})
        told = ({"via": "notice", "notice_id": w.notice_id} if w.notice_id is not None
                else {"via": "stream", "frame_id": w.frame_id})
        entries.append({"block_id": w.block_id, "revision": w.revision, "cause": w.cause, "withdrawn_at": w.at,
                        "told": told, "seen_by": seen_by,
                        "outstanding": sum(1 for s in seen_by if s["received_withdrawal"] is False)})
    clients = {s["client_id"] for e in entries for s in e["seen_by"] if s["client_id"] is not None}
    return {"run_id": run_id, "withdrawals": entries, "clients": len(clients),
            "outstanding": sum(e["outstanding"] for e in entries),
            "unknown": sum(1 for e in entries for s in e["seen_by"] if s["received_withdrawal"] is None)}


def _received(w: Withdrawal, client_id: str | None, positions: Mapping[str, Position],
              notice_receipts: Mapping[tuple[int, str], str]) -> tuple[bool | None, str | None]:
    if client_id is None:
        return None, None  # a client that never named itself cannot be asked
    if w.notice_id is not None:
        at = notice_receipts.get((w.notice_id, client_id))
        return at is not None, at
    position = positions.get(client_id)
    if w.frame_id is not None and position is not None and position.last_event_id >= w.frame_id:
        return True, position.at
    return False, None

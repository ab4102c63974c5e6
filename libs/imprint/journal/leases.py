"""X10 — the run lease: a run stays open while its runtime is alive.

Every runtime message of a run renews its lease; the runtime SDK sends ``run.heartbeat``
while a model or tool call is in flight, so a slow call is not silence. When no runtime
message of an open run (admitted, queued or running) reached the Journal for the lease
(``IMPRINT_RUN_LEASE_SECONDS``), the Journal closes the run ``failed`` with reason
``runtime_lost``. What the closing records on the execution, in one transaction with the
release of its lease (:func:`lapse`):

* ``LeaseLapsed`` — the fact that the lease lapsed, and the lease it had; announced on
  ``imprint.control.v1`` as ``run.lease_lapsed``, so Publication ends the run too;
* ``Transitioned(failed, reason=runtime_lost)`` and ``Closed`` — the ordinary closing
  (X2), announced on ``imprint.runs.v1`` like any transition, so Delivery ends the
  run's streams with ``done``.

Nothing else changes: committed blocks and observed effects stay (P20), and the closed
lifecycle refuses — and records — whatever that runtime sends later (a late
``run.completed``, a stage, a heartbeat). The reason is a code the Journal writes itself,
never private text, so it is stored unsealed (:data:`imprint.journal.lifecycle.JOURNAL_REASONS`).

Where the deadline lives. Renewals are not facts: one event per runtime message would
double the log. The instance that consumes a run's runtime partition keeps the
deadlines of that partition's open runs in memory (:class:`LeaseBook`: a renewal is a
constant-time move to the end of one ordered map; as every lease has the same length
that order *is* the order of deadlines, so a sweep reads only the runs that are due).
What must survive a restart is *which* runs are open, and that is recorded:
:class:`LeaseLane`, one aggregate per runtime partition, holds a run from its admission
to its closing (written in the same transaction as the transition). An instance that
takes a partition (at start, or from another instance in a rebalance) reads its lane and
gives each open run a full lease from that moment — never earlier than the deadline
the previous owner held, since that owner processed nothing after it let go, and at
most one lease later; the runtime's messages the new owner has still to consume renew
them as they come.

Several instances. Only the owner of a run's runtime partition holds its deadline, so
only the owner closes it. The closing is a unit of work on the execution and the lane
under optimistic concurrency, with a deterministic event id (:func:`lapse_event_id`): if
two instances overlap during a rebalance, one commits and the other's redo finds the run
closed and records nothing. The owner reads its book again right before each closing,
so a runtime message that arrived while a sweep was under way keeps its run open.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal
from uuid import uuid5

from eventsourcing.domain import Aggregate

from imprint.contracts.runtime import LIFECYCLE_TYPES
from imprint.journal import ids
from imprint.journal.execution import AnswerExecution
from imprint.journal.lifecycle import LIVE, RUNTIME_LOST
from imprint.workspace import Workspace



def lapse_event_id(run_id: str) -> str:
    """The one id of a run's lease lapse: a second closing attempt is the same fact, a no-op."""
    return str(uuid5(ids.JOURNAL_NAMESPACE, f"lease-lapsed:{run_id}"))


def is_open(execution: AnswerExecution | None) -> bool:
    """Whether a run holds a lease: admitted and not yet in a terminal state, not erased."""
    return execution is not None and execution.state in LIVE and not execution.erased


class LeaseLane(Aggregate):
    """The open runs of one partition of ``imprint.runtime.v1`` (the *lane*): what an
    instance that takes the partition reads to know whose lease it now keeps. It holds
    only open runs; its history is two events a run (snapshots keep a reload short)."""
    class_version = 1

    id_for = staticmethod(ids.lane_id)

    class Started(Aggregate.Created):
        class_version = 1
        lane: int

    class Held(Aggregate.Event):
        class_version = 1
        run_id: str

        def apply(self, lane: LeaseLane) -> None:
            lane.runs[self.run_id] = None

    class Released(Aggregate.Event):
        class_version = 1
        run_id: str
        state: str
        """The state the run left the lane in (``failed`` after a lapse)."""

        def apply(self, lane: LeaseLane) -> None:
            lane.runs.pop(self.run_id, None)

    def __init__(self, lane: int) -> None:
        self.lane = lane
        self.runs: dict[str, None] = {}

    @classmethod
    def start(cls, lane: int) -> LeaseLane:
        return cls._create(cls.Started, id=cls.id_for(lane), lane=lane)

    def hold(self, run_id: str) -> bool:
        if run_id in self.runs:
            return False
        self.trigger_event(self.Held, run_id=run_id)
        return True

    def release(self, run_id: str, state: str) -> bool:
        if run_id not in self.runs:
            return False
        self.trigger_event(self.Released, run_id=run_id, state=state)
        return True


@dataclass(frozen=True, slots=True)
class LeaseChange:
    """A run whose lease a committed unit began (``held``) or ended (``released``): what the
    instance's :class:`LeaseBook` learns once the unit is committed."""

    kind: Literal["held", "released"]
    run_id: str
    lane: int


@dataclass(frozen=True, slots=True)
class Lapse:
    """What a lapse committed: the run was closed ``failed``/``runtime_lost`` (``closed``), or it
    was no longer open (ended, erased) and only its lease was released."""

    run_id: str
    closed: bool


def _lane(ws: Workspace, lane: int, *, create: bool) -> LeaseLane | None:
    found = ws.get(LeaseLane, LeaseLane.id_for(lane))
    if found is None and create:
        found = LeaseLane.start(lane)
        ws.add(found)
    return found


def keep(ws: Workspace, lane: int, message: Any) -> list[LeaseChange]:
    """After a runtime lifecycle message was handled: a run that became open is held in its
    lane, one that closed is released (same unit of work, same transaction). Other messages
    change no lease fact; they renew the lease in memory only."""
    if getattr(message, "type", None) not in LIFECYCLE_TYPES:
        return []
    execution = ws.get(AnswerExecution, ids.execution_id(message.run_id))
    if execution is None:
        return []
    if is_open(execution):
        held = _lane(ws, lane, create=True)
        assert held is not None
        return [LeaseChange("held", message.run_id, lane)] if held.hold(message.run_id) else []
    found = _lane(ws, lane, create=False)
    if found is not None and found.release(message.run_id, execution.state.value if execution.state else "none"):
        return [LeaseChange("released", message.run_id, lane)]
    return []


def lapse(ws: Workspace, run_id: str, lane: int, lease_seconds: float) -> Lapse | None:
    """The lease of ``run_id`` lapsed: close the run ``failed`` with reason ``runtime_lost``
    and release its lease. A run that is no longer open (it ended meanwhile, or its
    conversation was deleted) is only released. ``None``: nothing to record."""
    execution = ws.get(AnswerExecution, ids.execution_id(run_id))
    closed = False
    if execution is not None and is_open(execution):
        closed = execution.lapse(lapse_event_id(run_id), RUNTIME_LOST, lease_seconds)
    found = _lane(ws, lane, create=False)
    state = execution.state.value if execution is not None and execution.state else "none"
    released = found is not None and found.release(run_id, state)
    if not (closed or released):
        return None
    return Lapse(run_id, closed)


class LeaseBook:
    """The lease deadlines of the open runs of the lanes one instance owns, in memory.

    Every lease has the same length, so the runs ordered by their last renewal are ordered
    by deadline: a renewal moves its run to the end (constant time), and :meth:`due` reads
    from the front only the runs whose lease has lapsed. Times are seconds of a monotonic
    clock, given by the caller; a renewal never goes back in time, so the order holds even
    when callers' clocks were read in another order than they call. Not thread-safe: its
    owner serializes calls."""

    def __init__(self, lease_seconds: float) -> None:
        if lease_seconds <= 0:
            raise ValueError("a lease lasts more than 0 seconds")
        self.lease_seconds = lease_seconds
        self._renewed: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._latest = float("-inf")

    def __len__(self) -> int:
        return len(self._renewed)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._renewed

    def _at(self, now: float) -> float:
        self._latest = max(self._latest, now)
        return self._latest

    def hold(self, run_id: str, lane: int, now: float) -> None:
        """A run that became open in ``lane``: its lease starts now."""
        self._renewed[run_id] = (lane, self._at(now))
        self._renewed.move_to_end(run_id)

    def renew(self, run_id: str, now: float) -> bool:
        """A runtime message of ``run_id`` arrived; ``False``: no lease of this instance's."""
        held = self._renewed.get(run_id)
        if held is None:
            return False
        self._renewed[run_id] = (held[0], self._at(now))
        self._renewed.move_to_end(run_id)
        return True

    def release(self, run_id: str) -> None:
        self._renewed.pop(run_id, None)

    def take(self, lane: int, run_ids: Iterable[str], now: float) -> None:
        """This instance now owns ``lane``: each of its open runs (as the lane records them)
        gets a full lease from now, unless this instance already keeps its deadline."""
        for run_id in run_ids:
            if run_id not in self._renewed:
                self.hold(run_id, lane, now)

    def drop(self, lanes: Iterable[int]) -> None:
        """These lanes went to another instance: their deadlines are its to keep."""
        gone = set(lanes)
        for run_id in [r for r, (lane, _) in self._renewed.items() if lane in gone]:
            del self._renewed[run_id]

    def deadline(self, run_id: str) -> float | None:
        held = self._renewed.get(run_id)
        return None if held is None else held[1] + self.lease_seconds

    def next_deadline(self) -> float | None:
        """When the earliest lease lapses (``None``: none is kept). Every lease has the same
        length, so a lease held or renewed later never lapses sooner than ``now`` plus a
        lease: whoever waits for this deadline need not be woken by a new one."""
        for _, renewed in self._renewed.values():
            return renewed + self.lease_seconds
        return None

    def is_due(self, run_id: str, now: float) -> bool:
        deadline = self.deadline(run_id)
        return deadline is not None and deadline <= now

    def due(self, now: float) -> list[tuple[str, int]]:
        """The runs whose lease lapsed by ``now``, with their lane, oldest renewal first."""
        lapsed: list[tuple[str, int]] = []
        for run_id, (lane, renewed) in self._renewed.items():
            if renewed + self.lease_seconds > now:
                break
            lapsed.append((run_id, lane))
        return lapsed


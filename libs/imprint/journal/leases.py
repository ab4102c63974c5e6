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
:class:`LeaseShard`, one aggregate per runtime partition (the *shard*), holds a run from its
admission to its closing (written in the same transaction as the transition). An instance that
takes a partition (at start, or from another instance in a rebalance) reads its shard's record and
gives each open run a full lease from that moment — never earlier than the deadline
the previous owner held, since that owner processed nothing after it let go, and at
most one lease later; the runtime's messages the new owner has still to consume renew
them as they come.

Several instances. Only the owner of a run's runtime partition holds its deadline, so
only the owner closes it. The closing is a unit of work on the execution and the shard's
record under optimistic concurrency, with a deterministic event id (:func:`lapse_event_id`): if
two instances overlap during a rebalance, one commits and the other's redo finds the run
closed and records nothing. The owner reads its book again right before each closing,
so a runtime message that arrived while a sweep was under way keeps its run open.

Logs before this release call the shard a *lane* (``LeaseLane``, its ``lane``): the old topic
resolves to :class:`LeaseShard` and the upcasters read the old field, and the aggregate id is
still spelled ``lease-lane:<shard>`` (:func:`imprint.journal.ids.lease_shard_id`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal
from uuid import uuid5

from eventsourcing.domain import Aggregate
from eventsourcing.utils import register_topic

from imprint.contracts.runtime import LIFECYCLE_TYPES
from imprint.ids import FoundByKey
from imprint.journal import ids, queueing
from imprint.journal.execution import AnswerExecution
from imprint.journal.lifecycle import LIVE, RUNTIME_LOST
from imprint.renames import lane_is_shard
from imprint.workspace import Workspace



def lapse_event_id(run_id: str) -> str:
    """The one id of a run's lease lapse: a second closing attempt is the same fact, a no-op."""
    return str(uuid5(ids.JOURNAL_NAMESPACE, f"lease-lapsed:{run_id}"))


def is_open(execution: AnswerExecution | None) -> bool:
    """Whether a run holds a lease: admitted and not yet in a terminal state, not erased."""
    return execution is not None and execution.state in LIVE and not execution.erased


class LeaseShard(FoundByKey, Aggregate, key=ids.lease_shard_id, by=("shard",)):
    """The open runs of one partition of ``imprint.runtime.v1`` (the *shard*): what an
    instance that takes the partition reads to know whose lease it now keeps. It holds
    only open runs; its history is two events a run (snapshots keep a reload short).

    v2: the snapshot state's ``lane`` is ``shard``."""

    class_version = 2

    upcast_v1_v2 = staticmethod(lane_is_shard)

    class Started(Aggregate.Created):
        """v2: ``lane`` is ``shard``."""

        class_version = 2
        shard: int

        upcast_v1_v2 = staticmethod(lane_is_shard)

    class Held(Aggregate.Event):
        class_version = 1
        run_id: str

        def apply(self, record: LeaseShard) -> None:
            record.runs[self.run_id] = None

    class Released(Aggregate.Event):
        class_version = 1
        run_id: str
        state: str
        """The state the run left the shard in (``failed`` after a lapse)."""

        def apply(self, record: LeaseShard) -> None:
            record.runs.pop(self.run_id, None)

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.runs: dict[str, None] = {}

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


register_topic("imprint.journal.leases:LeaseLane", LeaseShard)


@dataclass(frozen=True, slots=True)
class LeaseChange:
    """A run whose lease a committed unit began (``held``) or ended (``released``): what the
    instance's :class:`LeaseBook` learns once the unit is committed."""

    kind: Literal["held", "released"]
    run_id: str
    shard: int


@dataclass(frozen=True, slots=True)
class Lapse:
    """What a lapse committed: the run was closed ``failed``/``runtime_lost`` (``closed``), or it
    was no longer open (ended, erased) and only its lease was released."""

    run_id: str
    closed: bool


def keep(ws: Workspace, shard: int, message: Any) -> list[LeaseChange]:
    """After a runtime lifecycle message was handled: a run that became open is held in its
    shard, one that closed is released (same unit of work, same transaction). Other messages
    change no lease fact; they renew the lease in memory only."""
    if getattr(message, "type", None) not in LIFECYCLE_TYPES:
        return []
    execution = ws.get(AnswerExecution, ids.execution_id(message.run_id))
    if execution is None:
        return []
    if is_open(execution):
        held = LeaseShard.found_or_added(ws, shard)
        return [LeaseChange("held", message.run_id, shard)] if held.hold(message.run_id) else []
    found = LeaseShard.found_in(ws, shard)
    if found is not None and found.release(message.run_id, execution.state.value if execution.state else "none"):
        return [LeaseChange("released", message.run_id, shard)]
    return []


def lapse(ws: Workspace, run_id: str, shard: int, lease_seconds: float) -> Lapse | None:
    """The lease of ``run_id`` lapsed: close the run ``failed`` with reason ``runtime_lost``
    and release its lease. A run that is no longer open (it ended meanwhile, or its
    conversation was deleted) is only released. ``None``: nothing to record."""
    execution = ws.get(AnswerExecution, ids.execution_id(run_id))
    closed = False
    if execution is not None and is_open(execution):
        closed = execution.lapse(lapse_event_id(run_id), RUNTIME_LOST, lease_seconds)
        if closed:
            queueing.ended(ws, run_id, lapse_event_id(run_id))  # X12: the next question's turn
    found = LeaseShard.found_in(ws, shard)
    state = execution.state.value if execution is not None and execution.state else "none"
    released = found is not None and found.release(run_id, state)
    if not (closed or released):
        return None
    return Lapse(run_id, closed)


class LeaseBook:
    """The lease deadlines of the open runs of the shards one instance owns, in memory.

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

    def hold(self, run_id: str, shard: int, now: float) -> None:
        """A run that became open in ``shard``: its lease starts now."""
        self._renewed[run_id] = (shard, self._at(now))
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

    def take(self, shard: int, run_ids: Iterable[str], now: float) -> None:
        """This instance now owns ``shard``: each of its open runs (as the shard records them)
        gets a full lease from now, unless this instance already keeps its deadline."""
        for run_id in run_ids:
            if run_id not in self._renewed:
                self.hold(run_id, shard, now)

    def drop(self, shards: Iterable[int]) -> None:
        """These shards went to another instance: their deadlines are its to keep."""
        gone = set(shards)
        for run_id in [r for r, (shard, _) in self._renewed.items() if shard in gone]:
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
        """The runs whose lease lapsed by ``now``, with their shard, oldest renewal first."""
        lapsed: list[tuple[str, int]] = []
        for run_id, (shard, renewed) in self._renewed.items():
            if renewed + self.lease_seconds > now:
                break
            lapsed.append((run_id, shard))
        return lapsed


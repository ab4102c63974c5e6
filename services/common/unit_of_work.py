"""The tracked unit of work: one for every consumer, whatever its store.

A consumer's poll is applied in ONE unit: :meth:`TrackedUnitOfWork.run` takes the
poll, the consumer's :class:`Policy` and its :class:`Sink` (an event log,
:class:`services.common.event_log.EventLog`, or Delivery's view tables) and

1. skips every message at or below its partition's recorded position (a redelivery
   changes nothing);
2. runs the policy over the sink's workspace; if it showed something outside the store
   (P14: a preview), pauses before the commit (:meth:`TrackedUnitOfWork.steps`: the
   consumer's event loop lets what was shown leave first; :meth:`TrackedUnitOfWork.run`
   does not pause);
3. records what the policy decided together with each partition's position (the
   eventsourcing tracking record ``<topic>#<partition>`` → offset) in ONE transaction;
4. tells how it ended, as a typed :data:`Outcome`.

A sink refuses a position that another consumer recorded first, and an aggregate
version another writer took (optimistic concurrency), with ``IntegrityError``. The unit
then re-reads the positions: if every one was recorded meanwhile the poll is
:class:`Redelivered`; if some were, the rest is redone; otherwise it lost a race and is
redone on fresh state — unless the policy showed something outside the store before the
commit (P14: a preview), which only the consumer can answer for: :class:`Conflict`.
A commit whose outcome cannot be confirmed (the connection lost around ``COMMIT``) is
:class:`Unconfirmed`; one the store refused outright is :class:`Refused`. What each
means for the consumer's facts is the consumer's to say (P15 for Publication:
:mod:`imprint.publication.saving`)."""

from __future__ import annotations

import random
import time
from collections.abc import Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError, PersistenceError, Tracking

from services.common.inbound import Inbound
from services.common.observability import get_logger

log = get_logger(__name__)

W = TypeVar("W")
W_contra = TypeVar("W_contra", contravariant=True)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


# ---------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Recorded(Generic[R]):
    """The policy's effects and the positions are recorded."""

    result: R


@dataclass(frozen=True)
class Redelivered:
    """Every message was at or below its recorded position: nothing was done."""


@dataclass(frozen=True)
class Conflict(Generic[R]):
    """Lost an optimistic-concurrency race after showing something outside the store;
    nothing was recorded, and the unit was not redone."""

    result: R
    error: IntegrityError


@dataclass(frozen=True)
class Unconfirmed(Generic[R]):
    """The commit was sent and its outcome could not be confirmed."""

    result: R
    error: PersistenceError


@dataclass(frozen=True)
class Refused(Generic[R]):
    """The store refused the commit outright: nothing was recorded."""

    result: R
    error: PersistenceError


Outcome = Recorded[R] | Redelivered | Conflict[R] | Unconfirmed[R] | Refused[R]

Done = TypeVar("Done")
Steps = Generator[None, None, Done]
"""A unit of work that pauses (yields) where its caller may act before it goes on — before
a commit, once the policy showed something — and ends with its outcome (the generator's
return value). A caller in a worker thread runs it :func:`through`; the consumer's event
loop turns between its steps (``services.publication.consumer``)."""


class ConflictsExhausted(RuntimeError):
    """A unit kept losing optimistic-concurrency races; the poll is not acknowledged."""


# ---------------------------------------------------------------------- the two seams


class Policy(Protocol[W_contra, R_co]):
    """What a consumer does with the messages of a poll, over its sink's workspace."""

    def apply(self, workspace: W_contra, fresh: Sequence[Inbound]) -> R_co:
        """Decide, reading and changing the workspace only (never saving)."""
        ...

    def shown(self, result: R_co) -> bool:  # type: ignore[misc]
        """Whether the unit showed anything outside the store before its commit."""
        ...


class Unit(Protocol[W]):
    """One unit of work on a sink."""

    @property
    def positions(self) -> dict[str, int] | Sequence[int] | object:
        ...

    @property
    def workspace(self) -> W:
        ...

    def record(self, trackings: Sequence[Tracking]) -> None:
        """Record the workspace's changes with these positions (committed when the unit ends)."""
        ...


class Sink(Protocol[W]):
    """Where a consumer's decisions are recorded: an event log or view tables."""

    def unit(self, names: Sequence[str]) -> AbstractContextManager[Unit[W]]:
        """A unit over these partitions: their recorded positions (``positions[name]``, -1
        for none) and a workspace; committed when the context ends without an error."""
        ...

    def recorded(self, tracking: Tracking) -> bool:
        """Whether ``tracking`` is at or below its partition's recorded position (read again)."""
        ...


# ---------------------------------------------------------------------- the unit of work


class TrackedUnitOfWork:
    """Runs a consumer's policy over a poll and records the result with its positions."""

    def __init__(self, *, max_attempts: int = 50) -> None:
        self.max_attempts = max_attempts
        self.conflicts = 0
        """Units redone after losing a concurrency race (a metric)."""

    def run(self, batch: Sequence[Inbound], policy: Policy[W, R], sink: Sink[W]) -> Outcome[R]:
        """The unit at once: a pause before a commit (:meth:`steps`) is no pause at all."""
        return through(self.steps(batch, policy, sink))

    def steps(self, batch: Sequence[Inbound], policy: Policy[W, R], sink: Sink[W]) -> Steps[Outcome[R]]:
        """The unit, paused once before each commit whose policy showed something outside the
        store (P14: a preview): the caller gets its turn there (:data:`Steps`) to let what was
        shown leave, and resumes the unit to commit it."""
        items = in_order(batch)
        names = sorted({item.tracking.application_name for item in items})
        for attempt in range(self.max_attempts):
            result: R | None = None
            committing = False
            trackings: list[Tracking] = []
            try:
                with sink.unit(names) as unit:
                    positions = unit.positions
                    fresh = [item for item in items if item.offset > positions[item.tracking.application_name]]  # type: ignore[index]
                    if attempt == 0 and len(fresh) < len(items):
                        log.info("redelivered positions skipped", skipped=len(items) - len(fresh))
                    if not fresh:
                        return Redelivered()
                    last = {item.tracking.application_name: item.tracking for item in fresh}
                    trackings = list(last.values())
                    result = policy.apply(unit.workspace, fresh)
                    if policy.shown(result):
                        yield
                    committing = True
                    unit.record(trackings)
                return Recorded(result)  # type: ignore[arg-type]
            except IntegrityError as error:
                recorded = [t for t in trackings if sink.recorded(t)]
                if recorded:
                    log.info("positions already recorded by another consumer",
                             positions={t.application_name: t.notification_id for t in recorded})
                    if len(recorded) == len(trackings):
                        return Redelivered()
                    continue  # redo the partitions nobody recorded
                self.conflicts += 1
                if result is not None and policy.shown(result):
                    return Conflict(result, error)
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
            except (OperationalError, InterfaceError) as error:
                if not committing:
                    raise  # a read failed: nothing was sent to be committed; the poll is retried
                return Unconfirmed(result, error)  # type: ignore[arg-type]
            except PersistenceError as error:
                if not committing:
                    raise
                return Refused(result, error)  # type: ignore[arg-type]
        raise ConflictsExhausted(f"{names}: gave up after {self.max_attempts} conflicting attempts")

    def run_untracked(self, policy: Policy[W, R | None], sink: Sink[W]) -> R | None:
        """A unit no Kafka message caused (an operator's deletion, a retention sweep): the
        same record-or-redo-on-conflict, without a position. The policy's ``None``: nothing
        to do."""
        for attempt in range(self.max_attempts):
            try:
                with sink.unit(()) as unit:
                    result = policy.apply(unit.workspace, ())
                    if result is None:
                        return None
                    unit.record(())
                return result
            except IntegrityError:
                self.conflicts += 1
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise ConflictsExhausted(f"gave up after {self.max_attempts} conflicting attempts")


def through(steps: Steps[Done]) -> Done:
    """Run ``steps`` to their end without pausing: what they end with."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value  # type: ignore[no-any-return]


def in_order(batch: Sequence[Inbound]) -> list[Inbound]:
    """The poll's messages per partition in offset order, each offset once."""
    groups: dict[str, dict[int, Inbound]] = {}
    for item in batch:
        groups.setdefault(item.tracking.application_name, {}).setdefault(item.offset, item)
    return [item for group in groups.values() for item in sorted(group.values(), key=lambda i: i.offset)]

"""The aggregates one unit of work reads and changes — the one seam between a
consumer's pure message policy and its store.

A policy (``imprint.journal.handling``, ``imprint.publication.handling``) asks a
:class:`Workspace` for aggregates by id and adds the ones it creates; it never
saves. Whoever runs the policy records every pending event of the workspace in
one transaction with the Kafka position (``services.common.unit_of_work``); a
policy may only ask for what is pending so far to be made durable first
(:meth:`Workspace.flush`, P13).
:class:`MemoryWorkspace` is the same protocol over a dict: pure tests run the
policies with it, without a database."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

A = TypeVar("A", bound=Aggregate)


class Workspace(Protocol):
    """The aggregates of one unit of work."""

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None: ...

    def add(self, aggregate: Aggregate) -> None: ...

    def flush(self) -> None:
        """Make what is pending so far durable before the unit goes on (its position is
        still recorded only with the rest)."""
        ...

    def look_up(self, aggregate_ids: Iterable[UUID]) -> None:
        """These aggregates are about to be read: a store may find out at once which exist."""
        ...


class MemoryWorkspace:
    """A workspace over a plain dict (pure tests; also the base of the stored workspace)."""

    def __init__(self, store: dict[UUID, Aggregate] | None = None) -> None:
        self.store: dict[UUID, Aggregate] = store if store is not None else {}

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        agg = self.store.get(aggregate_id)
        if agg is not None and not isinstance(agg, cls):
            raise TypeError(f"{aggregate_id} is a {type(agg).__name__}, not a {cls.__name__}")
        return agg  # type: ignore[return-value]

    def add(self, aggregate: Aggregate) -> None:
        self.store[aggregate.id] = aggregate

    def flush(self) -> None:
        """Nothing is durable in memory: the pending events stay pending."""

    def look_up(self, aggregate_ids: Iterable[UUID]) -> None:
        """Everything is in memory already."""

    def aggregates(self) -> list[Aggregate]:
        return list(self.store.values())

    def pending(self) -> list[Any]:
        """Collect (and clear) every pending event — what a pure test inspects instead of a commit."""
        return [e for agg in self.store.values() for e in agg.collect_events()]

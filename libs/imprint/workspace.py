"""The aggregates one unit of work reads and changes — the one seam between a
consumer's pure message policy and its store.

A policy (``imprint.journal.handling``, ``imprint.publication.handling``) asks a
:class:`Workspace` for aggregates by id and adds the ones it creates; it never
saves. Its ``prepare`` says, once per unit and from the messages alone, every aggregate
its handlers will read (:meth:`Workspace.want`); whoever runs the policy
(``services.common.dispatch``) has them loaded together (``load_wanted``) before the
first handler, so a handler's reads are answered from what the workspace holds, in
memory, and a handler never waits on the store. Whoever runs the policy records every
pending event of the workspace in one transaction with the Kafka position
(``services.common.unit_of_work``); a policy may only ask for what is pending so far to
be made durable first (:meth:`Workspace.flush`, P13).

:class:`MemoryWorkspace` is the workspace itself, over a dict: what the unit holds, what
it knows is missing and what was wanted. Pure tests run the policies with it, without a
database; a store's workspace is the same class with its one hook, :meth:`MemoryWorkspace.fetch`
(an aggregate read that nobody wanted: rare paths, such as a source's withdrawal reaching
every run that relies on it), and its ``load_wanted``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import Aggregate

A = TypeVar("A", bound=Aggregate)


class Workspace(Protocol):
    """The aggregates of one unit of work."""

    shards: tuple[str, ...]
    """The input shards (partitions) this unit's messages came on: what a part that keeps
    an aggregate per shard (Publication's ``SourceDependents``) wants it for."""

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None: ...

    def add(self, aggregate: Aggregate) -> None: ...

    def flush(self) -> None:
        """Make what is pending so far durable before the unit goes on (its position is
        still recorded only with the rest)."""
        ...

    def want(self, aggregate_ids: Iterable[UUID], *, if_held: bool = False) -> None:
        """These aggregates are about to be read (a part's ``prepare``): the runner loads
        them together before the first handler, in one go (``load_wanted``). ``if_held``:
        they may be read — loaded only if the store holds them without a read (its hot
        cache); one a handler then asks for is read when asked."""
        ...


@dataclass(eq=False)
class MemoryWorkspace:
    """A workspace over a plain dict (pure tests; also the base of the stored workspace)."""

    store: dict[UUID, Aggregate] = field(default_factory=dict)
    shards: tuple[str, ...] = ("0",)
    missing: set[UUID] = field(default_factory=set)
    """Ids known not to exist (until added): asked again, they answer ``None`` at once."""
    wanted: dict[UUID, bool] = field(default_factory=dict)
    """What :meth:`want` was told, in order, until it is loaded: each id, and whether it is
    read for certain (``False``: only if held)."""

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        agg = self.store.get(aggregate_id)
        if agg is None:
            if aggregate_id in self.missing:
                return None
            agg = self.fetch(aggregate_id)
            if agg is None:
                self.missing.add(aggregate_id)
                return None
            self.store[aggregate_id] = agg
        if not isinstance(agg, cls):
            raise TypeError(f"{aggregate_id} is a {type(agg).__name__}, not a {cls.__name__}")
        return agg

    def fetch(self, aggregate_id: UUID) -> Aggregate | None:
        """An aggregate neither held nor known missing, nor wanted: a store reads it here
        (``None``: there is none). In memory there is nothing more than the dict."""
        return None

    def add(self, aggregate: Aggregate) -> None:
        self.missing.discard(aggregate.id)
        self.store[aggregate.id] = aggregate

    def want(self, aggregate_ids: Iterable[UUID], *, if_held: bool = False) -> None:
        for aggregate_id in aggregate_ids:
            self.wanted[aggregate_id] = self.wanted.get(aggregate_id, False) or not if_held

    def load_wanted(self) -> None:
        """Everything is in memory already: the wanted ids are let go."""
        self.wanted.clear()

    def flush(self) -> None:
        """Nothing is durable in memory: the pending events stay pending."""

    def aggregates(self) -> list[Aggregate]:
        return list(self.store.values())

    def pending(self) -> list[Any]:
        """Collect (and clear) every pending event — what a pure test inspects instead of a commit."""
        return [e for agg in self.store.values() for e in agg.collect_events()]

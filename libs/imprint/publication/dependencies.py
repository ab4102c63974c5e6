"""P21 (and the dependency half of P8): what a block stands on.

The effective sources of a block revision are its valid citations, the sources
of the Host values it renders, and — transitively, through ``[[ref:…]]`` and
``depends_on`` — the effective sources of every block it builds on. The walk
is cycle-safe (revisions can close a cycle).

A dependency on a block id is settled like a citation:

* an id that resolves to nothing this run issued (unknown, misspelled, another
  run's) or the block's own id is dropped as a binding; the block is published
  with ``metadata_dropped``;
* a block that exists but can no longer be relied on — withdrawn, or whose
  inherited sources are now unauthorized — makes this block a dependent
  effect: it is rejected ``unauthorized_source``, alone;
* a dependency whose effective sources are unknown (a legacy record) makes the
  new block's effective sources unknown too, never an invented empty set.

:func:`blocks_to_withdraw` answers the revocation question: which live blocks
rely on a source, directly or through any chain of dependencies."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

from imprint.publication.facts import BlockRecord
from imprint.publication.hints import EffectiveSources, union_sources


@dataclass(frozen=True, slots=True)
class DependencyCheck:
    kept: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    inherited: EffectiveSources = ()
    rejected: str | None = None
    """Internal detail when a dependency can no longer be relied on."""


def reachable(start: Iterable[str], next_of: Callable[[str], Iterable[str]],
              seen: Iterable[str] = ()) -> Iterator[str]:
    """Each block id reachable from ``start`` through ``next_of`` (what it builds on, or
    what builds on it), once, breadth-first, cycle-safe, none of ``seen``. ``next_of`` is
    asked about an id only once the caller is done with it, so a caller that stops early
    never asks about it."""
    visited = set(seen)
    queue = deque(start)
    while queue:
        current = queue.popleft()
        if current in visited:
            continue
        visited.add(current)
        yield current
        queue.extend(next_of(current))


def check_dependencies(
    own_block_id: str | None,
    block_ids: Iterable[str],
    lookup: Callable[[str], BlockRecord | None],
    source_ok: Callable[[str], bool],
) -> DependencyCheck:
    kept: list[str] = []
    dropped: list[str] = []
    for block_id in dict.fromkeys(block_ids):
        if block_id == own_block_id:
            dropped.append(block_id)
            continue
        record = lookup(block_id)
        if record is None:
            dropped.append(block_id)
        elif not record.live:
            return DependencyCheck(rejected=f"depends on withdrawn block {block_id}")
        else:
            kept.append(block_id)
    inherited: list[EffectiveSources] = []

    def next_of(block_id: str) -> Iterable[str]:
        record = lookup(block_id)
        return () if record is None else record.depends_on

    for block_id in reachable(kept, next_of):
        record = lookup(block_id)
        if record is None:
            continue
        if not record.live:
            return DependencyCheck(rejected=f"depends transitively on withdrawn block {block_id}")
        if record.effective_sources is not None:
            for source_id in record.effective_sources:
                if not source_ok(source_id):
                    return DependencyCheck(rejected=f"inherits unauthorized source {source_id} via {block_id}")
        inherited.append(record.effective_sources)
    return DependencyCheck(tuple(kept), tuple(dropped), union_sources((), *inherited))


def effective_sources(direct: Iterable[str], inherited: EffectiveSources) -> EffectiveSources:
    return union_sources(tuple(direct), inherited)


def blocks_to_withdraw(blocks: Mapping[str, BlockRecord], source_id: str) -> list[str]:
    """Live blocks whose effective sources include ``source_id`` (or are
    unknown — what cannot be confirmed is not left on display), then every live
    block depending on one of those, transitively. In delivery order."""
    live = {block_id: record for block_id, record in blocks.items() if record.live}
    dependents: dict[str, list[str]] = {}
    for block_id, record in live.items():
        for dependency in record.depends_on:
            dependents.setdefault(dependency, []).append(block_id)
    affected = {
        block_id
        for block_id, record in live.items()
        if record.effective_sources is None or source_id in record.effective_sources
    }
    affected = set(reachable(affected, lambda block_id: dependents.get(block_id, ())))
    return sorted(affected, key=lambda block_id: (live[block_id].ordinal, block_id))

"""An eventsourcing log as the sink of the tracked unit of work, and its hot aggregates.

:class:`EventLog` is how Publication and the Journal record a poll
(:mod:`services.common.unit_of_work`): the policy reads and changes aggregates in a
:class:`StoredWorkspace`; every pending event is recorded with each partition's position
in ONE transaction (eventsourcing ``ProcessingEvent`` on the backend's poll recorder).

Hot aggregates stay in the application's repository cache, changed in place
(``DEEPCOPY_FROM_AGGREGATE_CACHE=n``, no fast-forward read per get: see
:mod:`services.common.hot_cache`, which bounds them in bytes), so a message costs what
it changes, not what its run or source has accumulated. The cache is trustworthy because every way it can go stale is
caught: a unit that fails is evicted; a write based on a stale copy loses on its
aggregate version and is evicted and redone; a revoked partition is evicted
(:meth:`EventLog.forget_partitions`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import (AggregateNotFoundError, Application, LRUCache, ProcessingEvent, Repository,
                                      project_aggregate)
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import EventStore, Recording, Tracking

from imprint.workspace import MemoryWorkspace
from services.common.hot_cache import (HOT_CACHE, HOT_STATE_BYTES, IN_MEMORY_OVERHEAD, HotAggregates, WeighingMapper,
                                      start_load)
from services.common.recorders import PollRecorder
from services.common.settings import Settings

A = TypeVar("A", bound=Aggregate)

def project_events(aggregate: Any, domain_events: Iterable[Any]) -> Any:
    """The library's ``project_aggregate`` (each event's ``mutate`` in turn) without its
    per-event ``assert isinstance(event, CanMutateProtocol)``: on Python 3.11 an
    ``isinstance`` against a runtime-checkable protocol looks up each of the protocol's
    members, about 18 µs an event, more than decoding the event. Every event these logs
    hold is a library aggregate event, whose ``mutate`` is there by construction; one that
    is not still fails, on the call."""
    for domain_event in domain_events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class FoldingRepository(Repository[UUID]):
    """The library's repository, reading aggregates back with :func:`project_events` unless
    a caller names its own projector."""

    def get(self, aggregate_id: UUID, *, version: int | None = None, projector_func: Any = project_events,
            fastforward_skipping: bool = False, deepcopy_from_cache: bool = True) -> Any:
        if version is None:
            start_load()  # a miss puts what it read in the cache, weighed at these bytes
        return super().get(aggregate_id, version=version, projector_func=projector_func,
                           fastforward_skipping=fastforward_skipping, deepcopy_from_cache=deepcopy_from_cache)


def weighing(store: EventStore[UUID]) -> EventStore[UUID]:
    """``store`` read through a :class:`WeighingMapper`: the repository's reads count the
    stored bytes they decode (what a loaded aggregate weighs in the hot cache)."""
    return EventStore(WeighingMapper(store.mapper), store.recorder)


def hot_state_bytes(env: Mapping[str, str]) -> int:
    """The byte budget of an application's hot aggregates: ``HOT_STATE_BYTES`` of its
    environment, else the setting's default (``IMPRINT_HOT_STATE_BYTES``)."""
    given = env.get(HOT_STATE_BYTES)
    return int(given) if given else int(Settings.model_fields["hot_state_bytes"].default)


class HotCacheApplication(Application[UUID]):
    """An application whose repository caches its hot aggregates in :class:`HotAggregates`
    and reads them back with :func:`project_events` (the library's ``construct_repository``
    hook: its repository's settings, in a :class:`FoldingRepository`, its ``LRUCache``
    replaced)."""

    env = dict(HOT_CACHE)
    in_memory_overhead: float = IN_MEMORY_OVERHEAD
    """Bytes in memory per stored byte of this application's aggregates (see
    :data:`~services.common.hot_cache.IN_MEMORY_OVERHEAD`)."""
    kept_after_done: float = 0.0
    """Seconds an aggregate that is done stays in the hot cache (see :class:`HotAggregates`)."""

    def construct_repository(self) -> Repository[UUID]:
        made = super().construct_repository()
        snapshots = made.snapshot_store
        repository = FoldingRepository(
            weighing(made.event_store),
            snapshot_store=weighing(snapshots) if snapshots is not None else None,
            fastforward=made.fastforward, fastforward_skipping=made.fastforward_skipping,
            deepcopy_from_cache=made.deepcopy_from_cache)
        repository.cache = made.cache
        if isinstance(repository.cache, LRUCache):
            repository.cache = HotAggregates(repository.cache.maxsize, hot_state_bytes(self.env),
                                             self.stays_hot, self.kept_after_done, self.cache_clock,
                                             overhead=self.in_memory_overhead)
        return repository

    def stays_hot(self, aggregate: Any) -> bool:
        """Whether more of ``aggregate``'s messages are expected soon (the cache keeps it);
        an application says which of its aggregates are done."""
        return True

    # --- recording: the library's save, through its public parts ---------------------------

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """The library's ``Application.save`` (pending events collected into a
        ``ProcessingEvent``), recorded by :meth:`record`: whoever saves an aggregate of this
        log directly (an operator's tool appending reconciliation facts, a test playing
        another writer) goes through the same steps as a unit of work."""
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        processing.collect_events(*objs, **kwargs)
        return self.record(processing)

    def record(self, processing: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        """Record a processing event, in the order of the library's ``Application.save``:
        its events (:meth:`put_events`, one transaction), then its aggregates back in the
        repository's cache (the hot aggregates), the snapshots that are due
        (:meth:`take_snapshots`) and the commit told to the application (:meth:`committed`).

        Built from the library's public parts (``EventStore.put``, ``Repository.cache``,
        ``Application.snapshots``) instead of its private ``_record``, ``_take_snapshots``
        and ``_notify``, which an upgrade may change without notice: see
        ``docs/architecture.md``, "The log on eventsourcing"."""
        recordings = self.put_events(processing)
        repository = self.repository
        if repository.cache and not repository.fastforward:
            cache = repository.cache
            if isinstance(cache, HotAggregates):
                recorded: dict[UUID, int] = {}
                for recording in recordings:
                    originator = recording.notification.originator_id
                    recorded[originator] = recorded.get(originator, 0) + len(recording.notification.state)
                for aggregate_id, aggregate in processing.aggregates.items():
                    cache.put_recorded(aggregate_id, aggregate, recorded.get(aggregate_id, 0))
            else:
                for aggregate_id, aggregate in processing.aggregates.items():
                    cache.put(aggregate_id, aggregate)
        self.take_snapshots(processing)
        self.committed(recordings)
        return recordings

    def put_events(self, processing: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        """Put the processing event's events in the event store, in one transaction with its
        tracking record(s) (``saved_kwargs`` reach the recorder's ``insert_events``)."""
        return self.events.put(processing.events, tracking=processing.tracking, **processing.saved_kwargs)

    def take_snapshots(self, processing: ProcessingEvent[UUID]) -> None:
        """The library's snapshot policy: an aggregate of a class with an interval is
        snapshotted (from the store, at that version) when one of its new events' versions is
        a multiple of it. An application may choose its own."""
        if self.snapshots is None or not self.snapshotting_intervals:
            return
        for event in processing.events:
            aggregate = processing.aggregates.get(event.originator_id)
            if aggregate is None:
                continue
            interval = self.snapshotting_intervals.get(type(aggregate))
            if interval is not None and event.originator_version % interval == 0:
                self.take_snapshot(event.originator_id, version=event.originator_version,
                                   projector_func=self.snapshotting_projectors.get(type(aggregate), project_aggregate))

    def committed(self, recordings: list[Recording[UUID]]) -> None:
        """After each commit, with what it recorded (each event and its notification id):
        an application hands them on (to the relay in its process)."""

    def cache_clock(self) -> float:
        """The monotonic seconds :attr:`kept_after_done` is counted in."""
        return time.monotonic()


LATEST_VERSION = sys.maxsize
"""A version no aggregate reaches: asked for it, the repository rebuilds what is stored
(from the latest snapshot on) and leaves the hot cache alone."""


def stored(app: Application[UUID], aggregate_id: UUID) -> Any:
    """An aggregate as it is stored now, for a query. The hot cache is the units of work's:
    only this process's own writes keep it current (another instance's writes reach a unit
    as a version conflict, never a reader), so a reader — a status page, an operator's
    tool, a test waiting for a commit — reads the store. Raises ``AggregateNotFoundError``."""
    return app.repository.get(aggregate_id, version=LATEST_VERSION)


class StoredWorkspace(MemoryWorkspace):
    """The aggregates of one unit of work, read through the application's repository once."""

    def __init__(self, app: HotCacheApplication) -> None:
        super().__init__()
        self.app = app
        self._missing: set[UUID] = set()

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if aggregate_id in self.store:
            return super().get(cls, aggregate_id)
        if aggregate_id in self._missing:
            return None
        try:
            aggregate = self.app.repository.get(aggregate_id)
        except AggregateNotFoundError:
            self._missing.add(aggregate_id)
            return None
        self.store[aggregate_id] = aggregate
        return super().get(cls, aggregate_id)

    def add(self, aggregate: Aggregate) -> None:
        self._missing.discard(aggregate.id)
        super().add(aggregate)

    def load_wanted(self) -> None:
        """What the poll's ``prepare`` declared is read here (:class:`~services.common.dispatch.Dispatch`
        calls it once per attempt); this workspace reads on demand, so nothing is left to read."""

    def look_up(self, aggregate_ids: Iterable[UUID]) -> None:
        """Find out in one query which of these aggregates are stored (those neither held
        here nor in the repository's cache); ``get`` then answers ``None`` for the others
        without a read each (a new run would cost a read of its events and one of its
        snapshots per aggregate). Another instance creating one meanwhile is the usual
        lost race: the save conflicts and the unit is redone."""
        recorder: PollRecorder = self.app.recorder  # type: ignore[assignment]
        cache = self.app.repository.cache
        wanted = []
        for aggregate_id in dict.fromkeys(aggregate_ids):
            if aggregate_id in self.store or aggregate_id in self._missing:
                continue
            if cache is not None:
                try:
                    cache.get(aggregate_id)
                    continue
                except KeyError:
                    pass
            wanted.append(aggregate_id)
        if wanted:
            found = recorder.stored_ids(wanted)
            self._missing.update(aggregate_id for aggregate_id in wanted if aggregate_id not in found)

    def flush(self) -> None:
        """Record what is pending so far, without a position: it is durable before the unit
        goes on (P13: the quota a preview is about to show)."""
        self.record(())

    def record(self, trackings: Sequence[Tracking]) -> ProcessingEvent[UUID]:
        """Record every pending event and the tracking records (one per partition of a
        poll, :mod:`services.common.recorders`) in one transaction, then take the
        snapshots that are due and tell the application (:meth:`HotCacheApplication.record`)."""
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        if trackings:
            processing.saved_kwargs["trackings"] = list(trackings)
        for aggregate in self.store.values():  # ProcessingEvent.collect_events, without its
            # runtime-protocol checks per object: the store holds aggregates only
            processing.events.extend(aggregate.collect_events())
            processing.aggregates[aggregate.id] = aggregate
        if processing.events or trackings:
            self.app.record(processing)
        return processing

    def forget(self) -> None:
        """Evict everything this unit touched from the repository cache: it may hold unsaved state."""
        evict(self.app, self.store)
        self.store.clear()
        self._missing.clear()


def evict(app: Application[UUID], aggregate_ids: Iterable[UUID]) -> None:
    cache = app.repository.cache
    if cache is None:
        return
    for aggregate_id in list(aggregate_ids):
        try:
            cache.get(aggregate_id, evict=True)
        except KeyError:
            pass


@dataclass
class LogUnit:
    """One unit of work on an :class:`EventLog`."""

    positions: Mapping[str, int]
    workspace: StoredWorkspace
    recorded: list[Tracking] = field(default_factory=list)

    def record(self, trackings: Sequence[Tracking]) -> None:
        self.workspace.record(trackings)
        self.recorded = list(trackings)


class EventLog:
    """The sink of an eventsourcing application: its log, its positions, its hot cache."""

    def __init__(self, app: HotCacheApplication) -> None:
        self.app = app
        self._positions: dict[str, int] = {}
        self._touched: dict[str, set[UUID]] = {}
        """Per partition: the aggregates its units loaded, evicted when it is revoked."""

    @property
    def recorder(self) -> PollRecorder:
        return self.app.recorder  # type: ignore[return-value]

    def position(self, name: str) -> int:
        """The last offset of ``<topic>#<partition>`` committed with its effects (-1: none)."""
        if name not in self._positions:
            recorded = self.recorder.max_tracking_id(name)
            self._positions[name] = -1 if recorded is None else recorded
        return self._positions[name]

    @contextmanager
    def unit(self, names: Sequence[str]) -> Iterator[LogUnit]:
        unit = LogUnit({name: self.position(name) for name in names}, StoredWorkspace(self.app))
        try:
            yield unit
        except BaseException:
            unit.workspace.forget()
            raise
        for tracking in unit.recorded:
            self._positions[tracking.application_name] = tracking.notification_id
            self._remember(tracking.application_name, unit.workspace.store)

    def recorded(self, tracking: Tracking) -> bool:
        """Re-read one position: whether ``tracking`` is at or below it."""
        self._positions.pop(tracking.application_name, None)
        return self.position(tracking.application_name) >= tracking.notification_id

    def _remember(self, name: str, aggregate_ids: Iterable[UUID]) -> None:
        touched = self._touched.setdefault(name, set())
        touched.update(aggregate_ids)
        cache = self.app.repository.cache
        if isinstance(cache, HotAggregates) and len(touched) > 40_000:  # keep what the bounded cache still holds
            touched.intersection_update(cache.cache)

    def forget_partitions(self, names: Iterable[str]) -> None:
        """A partition moved to another instance: drop its position and the aggregates its
        units held, so this instance reloads them from the log if the partition comes back."""
        for name in names:
            self._positions.pop(name, None)
            evict(self.app, self._touched.pop(name, ()))

    def forget(self) -> None:
        """Drop every cached position and aggregate (e.g. after a deletion destroyed keys)."""
        self.forget_partitions(list(self._touched))
        self._positions.clear()

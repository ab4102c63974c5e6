"""An eventsourcing log as the sink of the tracked unit of work, and its hot aggregates.

:class:`EventLog` is how Publication and the Journal record a poll
(:mod:`services.common.unit_of_work`): the policy reads and changes aggregates in a
:class:`StoredWorkspace`; every pending event is recorded with each partition's position
in ONE transaction (eventsourcing ``ProcessingEvent`` on the backend's poll recorder).

Hot aggregates stay in the application's repository cache, changed in place
(``DEEPCOPY_FROM_AGGREGATE_CACHE=n``, no fast-forward read per get: see
:data:`HOT_CACHE`), so a message costs what it changes, not what its run or source
has accumulated. The cache is trustworthy because every way it can go stale is
caught: a unit that fails is evicted; a write based on a stale copy loses on its
aggregate version and is evicted and redone; a revoked partition is evicted
(:meth:`EventLog.forget_partitions`)."""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import (AggregateNotFoundError, Application, Cache, LRUCache, ProcessingEvent, Repository,
                                      project_aggregate)
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import Recording, Tracking

from imprint.workspace import MemoryWorkspace
from services.common.recorders import PollRecorder

A = TypeVar("A", bound=Aggregate)

HOT_CACHE = {
    # Every run in flight on one instance must fit, however many there are: a run evicted
    # between two of its proposals is read back from its snapshot and events at the next
    # one, so a count bound below the runs in flight turns every proposal into a reload.
    # What the cached aggregates hold is bounded by HOT_ENTRIES instead, which grows with
    # what the runs hold, not with how many they are.
    "AGGREGATE_CACHE_MAXSIZE": "100000",
    "AGGREGATE_CACHE_FASTFORWARD": "n",
    "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
}
"""eventsourcing settings of an application whose aggregates only its units of work change
(with :class:`HotAggregates` as its repository's cache: :class:`HotCacheApplication`)."""

HOT_ENTRIES = "AGGREGATE_CACHE_MAXENTRIES"
"""The setting (environment, like the library's ``AGGREGATE_CACHE_MAXSIZE``) that bounds
what the hot aggregates hold together, in :func:`entries`."""
DEFAULT_HOT_ENTRIES = 1_000_000
"""A Publication run holds about eight entries per proposal (its blocks, their fingerprints
and modification counts, the candidate and what it consumed), so a run of 25 proposals
holds about 200: this bound keeps some five thousand such runs in flight, or hundreds of
runs of hundreds of proposals. Runs proposing in turn wider than the bound would each be
pushed out before their next proposal (least recently used, round robin: every proposal a
reload), so the bound is set by the runs in flight an instance must hold; the count bound
alone would let long runs hold gigabytes."""


def entries(aggregate: object) -> int:
    """What an aggregate holds, for the cache's bound: one, plus the entries of every
    collection among its attributes (a run's blocks, fingerprints, candidates…). Counted,
    not measured: a length per attribute, each time the aggregate is put in the cache."""
    held = 1
    for value in getattr(aggregate, "__dict__", {}).values():
        if isinstance(value, _COLLECTIONS):
            held += len(value)
    return held


_COLLECTIONS = (dict, list, set)
"""What :func:`entries` counts. A tuple, built once: ``dict | list | set`` written in the
loop would build a union object for every attribute weighed."""


class HotAggregates(Cache[UUID, Any]):
    """The repository's cache of hot aggregates: least recently used out first, bounded by
    count (``AGGREGATE_CACHE_MAXSIZE``, as the library's ``LRUCache``) *and* by what the
    aggregates hold together (:data:`HOT_ENTRIES`): with a bound by count alone, the cached
    runs' memory would grow with the length of the runs.
    An aggregate is weighed when it is put: when the repository first reads it
    and after each save of it (the library puts every saved aggregate back), so a run
    growing in place is weighed again at its next commit. The aggregate put last is
    never the one evicted, however much it holds: the unit of work using it keeps it.

    An aggregate that ``stays_hot`` says is done (a run that ended) is kept
    ``kept_after_done`` seconds more (``0``: not at all), for the messages that still trail
    its end, and then leaves: a later message reads it back from the log. Without this the
    cache held every run an instance had seen until the bounds pushed it out (tens of
    thousands), and the cyclic collector walked them all at every full collection, in a
    pause that grew with the history, not with the load. The done aggregates wait in the
    order they were done; each put lets go of those whose time is up, so what is retired
    costs the put nothing more than those few (an idle instance retires nothing, and holds
    nothing new either)."""

    def __init__(self, maxsize: int, max_entries: int, stays_hot: Callable[[Any], bool] = lambda _: True,
                 kept_after_done: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.cache: OrderedDict[UUID, Any] = OrderedDict()  # least recently used first
        self.maxsize = maxsize
        self.max_entries = max_entries
        self.stays_hot = stays_hot
        self.kept_after_done = kept_after_done
        self._clock = clock
        self.held = 0
        """Entries held by the cached aggregates, as weighed when each was put."""
        self._weights: dict[UUID, int] = {}
        self._retiring: OrderedDict[UUID, float] = OrderedDict()
        """Cached aggregates that are done → when they leave, soonest first."""
        self._lock = threading.Lock()  # the units of work run in a worker thread, queries elsewhere

    def get(self, key: UUID, *, evict: bool = False) -> Any:
        with self._lock:
            value = self.cache[key]  # KeyError: not cached (what the repository expects)
            if evict:
                self._drop(key)
            else:
                self.cache.move_to_end(key)
            return value

    def put(self, key: UUID, value: Any | None) -> None:
        if value is None:
            return
        done = not self.stays_hot(value)
        now = self._clock()
        with self._lock:
            self._retire(now)
            if done and self.kept_after_done <= 0:
                if key in self.cache:
                    self._drop(key)
                return
        weight = entries(value)
        with self._lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                self.held -= self._weights[key]
            self.cache[key] = value
            self._weights[key] = weight
            self.held += weight
            if done:
                self._retiring.setdefault(key, now + self.kept_after_done)
            while len(self.cache) > 1 and (len(self.cache) > self.maxsize or self.held > self.max_entries):
                self._drop(next(iter(self.cache)))

    def _retire(self, now: float) -> None:
        while self._retiring:
            key, until = next(iter(self._retiring.items()))
            if until > now:
                return
            self._drop(key)

    def _drop(self, key: UUID) -> None:
        del self.cache[key]
        self.held -= self._weights.pop(key)
        self._retiring.pop(key, None)

    def __bool__(self) -> bool:
        return True  # the repository asks ``if self.cache``: an empty cache is still the cache


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
        return super().get(aggregate_id, version=version, projector_func=projector_func,
                           fastforward_skipping=fastforward_skipping, deepcopy_from_cache=deepcopy_from_cache)


class HotCacheApplication(Application[UUID]):
    """An application whose repository caches its hot aggregates in :class:`HotAggregates`
    and reads them back with :func:`project_events` (the library's ``construct_repository``
    hook: its repository's settings, in a :class:`FoldingRepository`, its ``LRUCache``
    replaced)."""

    env = dict(HOT_CACHE)
    kept_after_done: float = 0.0
    """Seconds an aggregate that is done stays in the hot cache (see :class:`HotAggregates`)."""

    def construct_repository(self) -> Repository[UUID]:
        made = super().construct_repository()
        repository = FoldingRepository(made.event_store, snapshot_store=made.snapshot_store,
                                       fastforward=made.fastforward, fastforward_skipping=made.fastforward_skipping,
                                       deepcopy_from_cache=made.deepcopy_from_cache)
        repository.cache = made.cache
        if isinstance(repository.cache, LRUCache):
            repository.cache = HotAggregates(repository.cache.maxsize,
                                             int(self.env.get(HOT_ENTRIES) or DEFAULT_HOT_ENTRIES),
                                             self.stays_hot, self.kept_after_done, self.cache_clock)
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
            for aggregate_id, aggregate in processing.aggregates.items():
                repository.cache.put(aggregate_id, aggregate)
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

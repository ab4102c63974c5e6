"""One tracked unit of work, for every consumer that keeps an eventsourcing log.

A consumer's poll is split by partition (``<topic>#<partition>``, the name of
its eventsourcing tracking record). For each partition, :meth:`TrackedUnitOfWork.run`

1. skips every message at or below the partition's recorded position (a
   redelivery is a no-op);
2. runs the consumer's pure policy over a :class:`StoredWorkspace`;
3. records every pending event of the workspace together with the tracking
   record of the last message, in ONE transaction (eventsourcing
   ``ProcessingEvent`` on a ``ProcessRecorder``);
4. on an ``IntegrityError`` — another process wrote the same position or one of
   the same aggregate versions (optimistic concurrency) — drops what it holds,
   re-reads the position and, unless the consumer's ``on_conflict`` says the
   conflict is final, runs the policy again on fresh state.

Hot aggregates stay in the application's repository cache, changed in place
(``DEEPCOPY_FROM_AGGREGATE_CACHE=n``, no fast-forward read per get: see
:data:`HOT_CACHE`), so a message costs what it changes, not what its run or source
has accumulated. The cache is trustworthy because every way it can go stale is
caught: a unit that fails is evicted; a write based on a stale copy loses on its
aggregate version and is evicted and redone; a revoked partition is evicted
(:meth:`TrackedUnitOfWork.forget_partitions`)."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, Cache, LRUCache, ProcessingEvent, Repository
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, ProcessRecorder, Tracking

from imprint.workspace import MemoryWorkspace
from services.common.inbound import Inbound
from services.common.observability import get_logger

log = get_logger(__name__)

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")

HOT_CACHE = {
    # Enough for every run in flight on one instance; a larger heap makes each of the
    # process's garbage collections slower (least recently used aggregates go first).
    "AGGREGATE_CACHE_MAXSIZE": "2000",
    "AGGREGATE_CACHE_FASTFORWARD": "n",
    "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
}
"""eventsourcing settings of an application whose aggregates only its units of work change
(with :class:`HotAggregates` as its repository's cache: :class:`HotCacheApplication`)."""

HOT_ENTRIES = "AGGREGATE_CACHE_MAXENTRIES"
"""The setting (environment, like the library's ``AGGREGATE_CACHE_MAXSIZE``) that bounds
what the hot aggregates hold together, in :func:`entries`."""
DEFAULT_HOT_ENTRIES = 150_000
"""~220 MB of hot aggregates (tracemalloc): a Publication run holds ~2.6 entries and
~3.8 KB per block (its record, its fingerprint, its candidate's outcome; runs of 25 and
of 400 proposals of two blocks), so the bound keeps ~1,150 runs of 25 proposals or ~70
of 400, where the count bound alone (2,000 aggregates) would let runs of 400 hold ~6 GB."""


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
"""What :func:`entries` counts. A tuple: ``dict | list | set`` written in the loop built a
union object per attribute and checked against it more slowly (3.9 µs to weigh an
aggregate of 28 attributes, against 1.5)."""


class HotAggregates(Cache[UUID, Any]):
    """The repository's cache of hot aggregates: least recently used out first, bounded by
    count (``AGGREGATE_CACHE_MAXSIZE``, as the library's ``LRUCache``) *and* by what the
    aggregates hold together (:data:`HOT_ENTRIES`): with a bound by count alone, 2,000
    cached runs would hold ~380 MB at 25 proposals a run and gigabytes at a few hundred.
    An aggregate is weighed when it is put: when the repository first reads it
    and after each save of it (the library puts every saved aggregate back), so a run
    growing in place is weighed again at its next commit. The aggregate put last is
    never the one evicted, however much it holds: the unit of work using it keeps it."""

    def __init__(self, maxsize: int, max_entries: int) -> None:
        super().__init__()
        self.cache: OrderedDict[UUID, Any] = OrderedDict()  # least recently used first
        self.maxsize = maxsize
        self.max_entries = max_entries
        self.held = 0
        """Entries held by the cached aggregates, as weighed when each was put."""
        self._weights: dict[UUID, int] = {}
        self._lock = threading.Lock()  # the units of work run in a worker thread, queries elsewhere

    def get(self, key: UUID, *, evict: bool = False) -> Any:
        with self._lock:
            value = self.cache[key]  # KeyError: not cached (what the repository expects)
            if evict:
                del self.cache[key]
                self.held -= self._weights.pop(key)
            else:
                self.cache.move_to_end(key)
            return value

    def put(self, key: UUID, value: Any | None) -> None:
        if value is None:
            return
        weight = entries(value)
        with self._lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                self.held -= self._weights[key]
            self.cache[key] = value
            self._weights[key] = weight
            self.held += weight
            while len(self.cache) > 1 and (len(self.cache) > self.maxsize or self.held > self.max_entries):
                oldest, _ = self.cache.popitem(last=False)
                self.held -= self._weights.pop(oldest)

    def __bool__(self) -> bool:
        return True  # the repository asks ``if self.cache``: an empty cache is still the cache


class HotCacheApplication(Application[UUID]):
    """An application whose repository caches its hot aggregates in :class:`HotAggregates`
    (the library's ``construct_repository`` hook; its ``LRUCache`` is replaced)."""

    env = dict(HOT_CACHE)

    def construct_repository(self) -> Repository[UUID]:
        repository = super().construct_repository()
        if isinstance(repository.cache, LRUCache):
            repository.cache = HotAggregates(repository.cache.maxsize,
                                             int(self.env.get(HOT_ENTRIES) or DEFAULT_HOT_ENTRIES))
        return repository


LATEST_VERSION = sys.maxsize
"""A version no aggregate reaches: asked for it, the repository rebuilds what is stored
(from the latest snapshot on) and leaves the hot cache alone."""


def stored(app: Application[UUID], aggregate_id: UUID) -> Any:
    """An aggregate as it is stored now, for a query. The hot cache is the units of work's:
    only this process's own writes keep it current (another instance's writes reach a unit
    as a version conflict, never a reader), so a reader — a status page, an operator's
    tool, a test waiting for a commit — reads the store. Raises ``AggregateNotFoundError``."""
    return app.repository.get(aggregate_id, version=LATEST_VERSION)


class ConflictsExhausted(RuntimeError):
    """A unit of work kept losing optimistic-concurrency races; the poll is not acknowledged."""


class StoredWorkspace(MemoryWorkspace):
    """The aggregates of one unit of work, read through the application's repository once."""

    def __init__(self, app: Application[UUID]) -> None:
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
        without a read each (a new run cost two reads of its events and two of its
        snapshots, one pair per aggregate). Another instance creating one meanwhile is
        the usual lost race: the save conflicts and the unit is redone. A recorder without
        ``stored_ids`` leaves every lookup to ``get``."""
        stored_ids = getattr(self.app.recorder, "stored_ids", None)
        if stored_ids is None:
            return
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
            found = stored_ids(wanted)
            self._missing.update(aggregate_id for aggregate_id in wanted if aggregate_id not in found)

    def record(self, tracking: Tracking | Sequence[Tracking] | None = None) -> ProcessingEvent[UUID]:
        """Record every pending event (and the tracking records) in one transaction, then
        take the snapshots that are due and tell the application (``_notify``), in the
        order of eventsourcing's ``Application.save``. Without tracking: a flush inside the unit (P13).
        Several tracking records (one per partition of a poll) need a recorder that takes
        them (:mod:`services.common.recorders`)."""
        trackings = [] if tracking is None else [tracking] if isinstance(tracking, Tracking) else list(tracking)
        processing: ProcessingEvent[UUID] = ProcessingEvent(tracking=trackings[0] if len(trackings) == 1 else None)
        if len(trackings) > 1:
            processing.saved_kwargs["trackings"] = trackings
        for aggregate in self.store.values():  # what ProcessingEvent.collect_events does for an
            # aggregate, without its two runtime-protocol isinstance checks per object (~40 µs
            # each time; the store holds aggregates only)
            processing.events.extend(aggregate.collect_events())
            processing.aggregates[aggregate.id] = aggregate
        if processing.events or trackings:
            recordings = self.app._record(processing)
            self.app._take_snapshots(processing)
            self.app._notify(recordings)  # the library's hook after a save (a relay's hand-off)
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


def by_partition(batch: Sequence[Inbound]) -> list[list[Inbound]]:
    """The poll's messages per partition, in offset order, each offset once."""
    groups: dict[str, dict[int, Inbound]] = {}
    for item in batch:
        groups.setdefault(item.tracking.application_name, {}).setdefault(item.offset, item)
    return [sorted(group.values(), key=lambda i: i.offset) for group in groups.values()]


Work = Callable[[StoredWorkspace, list[Inbound]], R]
Commit = Callable[[StoredWorkspace, list[Tracking], R], None]
OnConflict = Callable[[IntegrityError, "R | None"], None]


class TrackedUnitOfWork(Generic[R]):
    """Runs a consumer's policy over one partition's messages and records the result with its position."""

    def __init__(self, app: Application[UUID], *, max_attempts: int = 50) -> None:
        self.app = app
        self.max_attempts = max_attempts
        self.conflicts = 0
        """Units of work re-run after losing a concurrency race (a metric)."""
        self._positions: dict[str, int] = {}
        self._touched: dict[str, set[UUID]] = {}
        """Per tracking name (partition): the aggregates its units loaded, for eviction on revoke."""

    @property
    def recorder(self) -> ProcessRecorder:
        recorder = self.app.recorder
        assert isinstance(recorder, ProcessRecorder)
        return recorder

    def position(self, tracking_name: str) -> int:
        """The last offset of ``<topic>#<partition>`` committed with its effects (-1: none)."""
        if tracking_name not in self._positions:
            recorded = self.recorder.max_tracking_id(tracking_name)
            self._positions[tracking_name] = -1 if recorded is None else recorded
        return self._positions[tracking_name]

    @property
    def one_transaction_per_poll(self) -> bool:
        return bool(getattr(self.recorder, "records_many_trackings", False))

    def run_poll(
        self,
        batch: Sequence[Inbound],
        work: Work[R],
        *,
        commit: Commit[R] | None = None,
        on_conflict: OnConflict[R] | None = None,
    ) -> list[R]:
        """A whole poll: ONE unit of work and one transaction for all its partitions where
        the recorder takes several tracking records, else one per partition. Returns the
        result of each unit that recorded something."""
        units = [list(batch)] if self.one_transaction_per_poll else by_partition(batch)
        results = [self.run(items, work, commit=commit, on_conflict=on_conflict) for items in units if items]
        return [result for result in results if result is not None]

    def run(
        self,
        items: list[Inbound],
        work: Work[R],
        *,
        commit: Commit[R] | None = None,
        on_conflict: OnConflict[R] | None = None,
    ) -> R | None:
        """Apply ``work`` to the messages of ``items`` not yet recorded and record its events
        with the tracking record of each partition's last message. ``None``: nothing was new.

        ``commit`` replaces the plain record step (a consumer that must tell a failed
        save from an unknown one); it must let ``IntegrityError`` through. ``on_conflict``
        is told of each conflict and may raise to make it final (the poll is then retried
        by the consumer, as for any error); otherwise the unit is redone on fresh state."""
        items = [item for group in by_partition(items) for item in group]
        for attempt in range(self.max_attempts):
            fresh = [item for item in items if item.offset > self.position(item.tracking.application_name)]
            if attempt == 0 and len(fresh) < len(items):
                log.info("redelivered positions skipped", skipped=len(items) - len(fresh),
                         committed_through={name: self.position(name)
                                            for name in {i.tracking.application_name for i in items}})
            if not fresh:
                return None
            last: dict[str, Tracking] = {}
            for item in fresh:
                last[item.tracking.application_name] = item.tracking
            trackings = list(last.values())
            workspace = StoredWorkspace(self.app)
            result: R | None = None
            try:
                result = work(workspace, fresh)
                if commit is None:
                    workspace.record(trackings)
                else:
                    commit(workspace, trackings, result)
            except IntegrityError as error:
                workspace.forget()
                recorded = [t for t in trackings if self._recorded(t)]
                if recorded:
                    log.info("positions already recorded by another consumer",
                             positions={t.application_name: t.notification_id for t in recorded})
                    if len(recorded) == len(trackings):
                        return None
                    continue  # redo the partitions nobody recorded
                self.conflicts += 1
                if on_conflict is not None:
                    on_conflict(error, result)
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                continue
            except BaseException:
                workspace.forget()
                raise
            for tracking in trackings:
                self._positions[tracking.application_name] = tracking.notification_id
                self._remember(tracking.application_name, workspace.store)
            return result
        raise ConflictsExhausted(f"{sorted(last)}: gave up after {self.max_attempts} conflicting attempts")

    def _recorded(self, tracking: Tracking) -> bool:
        """Re-read one position; ``True`` if ``tracking`` is at or below it."""
        self._positions.pop(tracking.application_name, None)
        if self.recorder.has_tracking_id(tracking.application_name, tracking.notification_id):
            self._positions[tracking.application_name] = self.position(tracking.application_name)
            return True
        return False

    def untracked(self, work: Callable[[StoredWorkspace], R | None]) -> R | None:
        """A unit of work that no Kafka message caused (an operator's deletion, a retention
        sweep): the same record-or-redo-on-conflict, without a position. ``work`` returns
        ``None`` when there is nothing to do."""
        for attempt in range(self.max_attempts):
            workspace = StoredWorkspace(self.app)
            try:
                result = work(workspace)
                if result is None:
                    workspace.forget()
                    return None
                workspace.record()
            except IntegrityError:
                workspace.forget()
                self.conflicts += 1
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                continue
            except BaseException:
                workspace.forget()
                raise
            return result
        raise ConflictsExhausted(f"gave up after {self.max_attempts} conflicting attempts")

    def _remember(self, name: str, aggregate_ids: Iterable[UUID]) -> None:
        touched = self._touched.setdefault(name, set())
        touched.update(aggregate_ids)
        cache = self.app.repository.cache
        if cache is not None and len(touched) > 40_000:  # keep only what the (bounded) cache still holds
            held = getattr(cache, "cache", {})
            touched.intersection_update(held)

    def forget_partitions(self, tracking_names: Iterable[str]) -> None:
        """A partition moved to another instance: drop its positions and the aggregates its
        units held, so this instance reloads them from the log if the partition comes back."""
        for name in tracking_names:
            self._positions.pop(name, None)
            evict(self.app, self._touched.pop(name, ()))

    def forget(self) -> None:
        """Drop every cached position and aggregate (e.g. after a deletion destroyed keys)."""
        self.forget_partitions(list(self._touched))
        self._positions.clear()

    def holding(self) -> dict[str, Any]:
        """What this instance holds, for diagnostics."""
        return {name: len(ids) for name, ids in self._touched.items()}

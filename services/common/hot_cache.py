"""The hot aggregates of an eventsourcing application, bounded in bytes.

Publication and the Journal keep the aggregates their units of work change in the
application's repository cache (:class:`HotAggregates`). What the cache holds is bounded
by a byte budget (``IMPRINT_HOT_STATE_BYTES``, :class:`services.common.settings.Settings`),
weighed without walking what an aggregate holds: an aggregate weighs what was read to
build it (its snapshot's and events' stored bytes, counted as the repository decodes
them: :class:`WeighingMapper`) plus the stored bytes of each event recorded on it since,
times :data:`IN_MEMORY_OVERHEAD` for what the decoded objects cost over their stored
bytes. Weighing costs a length per event read or recorded, never a walk of a run's
history or state."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from uuid import UUID

from eventsourcing.application import Cache
from eventsourcing.persistence import Mapper, StoredEvent

HOT_CACHE = {
    # Every run in flight on one instance must fit, however many there are: a run evicted
    # between two of its proposals is read back from its snapshot and events at the next
    # one, so a count bound below the runs in flight turns every proposal into a reload.
    # What the cached aggregates hold is bounded by bytes instead (HotAggregates.max_bytes),
    # which grows with what the runs hold, not with how many they are; the count stays a
    # backstop for aggregates that weigh next to nothing.
    "AGGREGATE_CACHE_MAXSIZE": "100000",
    "AGGREGATE_CACHE_FASTFORWARD": "n",
    "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
}
"""eventsourcing settings of an application whose aggregates only its units of work change
(with :class:`HotAggregates` as its repository's cache: ``HotCacheApplication``)."""

HOT_STATE_BYTES = "HOT_STATE_BYTES"
"""The key of the application's environment (as the library's ``AGGREGATE_CACHE_MAXSIZE``)
carrying its byte budget: the composition roots put ``Settings.hot_state_bytes`` there;
absent, the setting's default applies."""

IN_MEMORY_OVERHEAD = 3.0
"""What an aggregate's decoded objects take in memory per byte of its stored events and
snapshot, unless its application says otherwise (``HotCacheApplication.in_memory_overhead``:
Publication's events carry sealed bodies its runs do not keep, so its factor is lower).
Stored state is compact JSON; decoded, each value is a Python object with its header,
each mapping a hash table, each string its own allocation. Calibrated by
``tests/component/common/test_hot_cache_calibration.py``, which measures (tracemalloc) the
memory of typical Publication runs and Journal executions read back from the log against
the bytes read to build them: each factor must cover that measure and not exceed it
several times over. Stored events that replace earlier state (a revision, a withdrawal)
are counted in full, so a long-lived aggregate is over-weighed rather than under-weighed
until it is next read from its snapshot."""

_read = threading.local()
"""Per thread: the stored bytes decoded since the current load began (units of work load
in one worker thread while queries read in others)."""


def start_load() -> None:
    """A repository is about to build an aggregate: count its stored bytes from zero."""
    _read.stored_bytes = 0


def bytes_loaded() -> int:
    """The stored bytes this thread decoded since :func:`start_load`."""
    return int(getattr(_read, "stored_bytes", 0))


class WeighingMapper(Mapper[UUID]):
    """A mapper that counts the stored bytes it decodes (:func:`bytes_loaded`), delegating
    everything to the application's own mapper. Only the repository's reading stores use
    it: what is written goes through the application's event store unchanged."""

    def __init__(self, mapper: Mapper[UUID]) -> None:  # noqa: D107 - the wrapped mapper decides everything
        self.mapper = mapper

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        return self.mapper.to_stored_event(domain_event)

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        _read.stored_bytes = getattr(_read, "stored_bytes", 0) + len(stored_event.state)
        return self.mapper.to_domain_event(stored_event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.mapper, name)


class HotAggregates(Cache[UUID, Any]):
    """The repository's cache of hot aggregates: least recently used out first, bounded by
    count (``AGGREGATE_CACHE_MAXSIZE``, as the library's ``LRUCache``) *and* by bytes
    (``max_bytes``): with a bound by count alone, the cached runs' memory would grow with
    the length of the runs.

    An aggregate is weighed when the repository puts it after reading it (:meth:`put`: the
    stored bytes read to build it) and re-weighed when a commit puts it back
    (:meth:`put_recorded`: plus the stored bytes of the events that commit recorded on
    it), each times ``overhead``. The aggregate put last is never the one evicted, however
    much it weighs: the unit of work using it keeps it.

    An aggregate that ``stays_hot`` says is done (a run that ended) is kept
    ``kept_after_done`` seconds more (``0``: not at all), for the messages that still trail
    its end, and then leaves: a later message reads it back from the log. Without this the
    cache held every run an instance had seen until the bounds pushed it out (tens of
    thousands), and the cyclic collector walked them all at every full collection, in a
    pause that grew with the history, not with the load. The done aggregates wait in the
    order they were done; each put lets go of those whose time is up, so what is retired
    costs the put nothing more than those few (an idle instance retires nothing, and holds
    nothing new either)."""

    def __init__(self, maxsize: int, max_bytes: int, stays_hot: Callable[[Any], bool] = lambda _: True,
                 kept_after_done: float = 0.0, clock: Callable[[], float] = time.monotonic,
                 overhead: float = IN_MEMORY_OVERHEAD) -> None:
        super().__init__()
        self.cache: OrderedDict[UUID, Any] = OrderedDict()  # least recently used first
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.stays_hot = stays_hot
        self.kept_after_done = kept_after_done
        self.overhead = overhead
        self._clock = clock
        self.held = 0
        """Bytes held by the cached aggregates, as weighed (see the class)."""
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

    def weight(self, key: UUID) -> int:
        """The bytes ``key`` is weighed at (0: not cached)."""
        return self._weights.get(key, 0)

    def put(self, key: UUID, value: Any | None) -> None:
        """The repository's put, after it read ``value`` from the log: weighed at the stored
        bytes this thread decoded for it (:func:`bytes_loaded`). An aggregate already
        cached keeps its weight."""
        if value is not None:
            self._put(key, value, None, bytes_loaded())

    def put_recorded(self, key: UUID, value: Any, recorded_bytes: int) -> None:
        """A commit recorded events of ``recorded_bytes`` stored bytes on ``value``: it
        weighs that much more (an aggregate the cache no longer held — new, or pushed out
        while its unit ran — weighs what this commit recorded)."""
        self._put(key, value, recorded_bytes, 0)

    def _put(self, key: UUID, value: Any, recorded: int | None, loaded: int) -> None:
        done = not self.stays_hot(value)
        now = self._clock()
        with self._lock:
            self._retire(now)
            if done and self.kept_after_done <= 0:
                if key in self.cache:
                    self._drop(key)
                return
            if key in self.cache:
                self.cache.move_to_end(key)
                before = self._weights[key]
                weight = before + int(recorded * self.overhead) if recorded is not None else before
                self.held -= before
            else:
                weight = int((recorded if recorded is not None else loaded) * self.overhead)
            self.cache[key] = value
            self._weights[key] = weight
            self.held += weight
            if done:
                self._retiring.setdefault(key, now + self.kept_after_done)
            while len(self.cache) > 1 and (len(self.cache) > self.maxsize or self.held > self.max_bytes):
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

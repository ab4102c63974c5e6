"""What a log's writer hands the relay running in its own process (see
:mod:`services.common.relay`, "Handed off, not read back"). Apart from the relay so that
whatever opens a log (the recovery tools too) does not import the Kafka clients."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import Recording
from opentelemetry.context import Context

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from services.common.hot_cache import IN_MEMORY_OVERHEAD
from services.common.recorders import COMMITTER

if TYPE_CHECKING:
    from services.common.kafka import Outgoing

Announce = Callable[[Any], Sequence[tuple[Topic, Message]]]
Batch = list[tuple[int, Sequence["Outgoing"]]]
TraceOf = Callable[[Any], Context | None]
"""A committed domain event → the trace context its announcements continue (``None``: none)."""


HANDOFF_SHARE = 8
"""The hand-off may weigh this fraction (1/8) of the part's hot-state budget
(``IMPRINT_HOT_STATE_BYTES``) on top of it: past that the relay is far behind, and reading
the log costs it less than the memory would."""


class Handoff:
    """Announcements of the commits of this process, handed to its own relay in memory.

    The application calls :meth:`committed` with the library's ``Recording``\\ s right
    after each commit (from its own ``HotCacheApplication.committed``): each entry is a
    notification id and what its event announces, built then, from the event just
    recorded. Only while its relay leads (:meth:`open`): a standby's commits are read from
    the log by whichever relay leads. The relay takes entries only as a run that
    continues its position exactly (:meth:`take`); anything else sends it to the log."""

    def __init__(self, announce: Announce, topics: Collection[str] = (), *, limit: int = 50_000,
                 max_bytes: int | None = None) -> None:
        self._announce = announce
        self._topics = frozenset(topics) or None
        self._limit = limit
        self._max_bytes = max_bytes
        """What the waiting entries may weigh together (``None``: only ``limit`` bounds them):
        each weighs its event's stored bytes times ``IN_MEMORY_OVERHEAD``, as a hot aggregate."""
        self._lock = threading.Lock()
        self._entries: deque[tuple[int, Sequence[Outgoing]]] = deque()
        self._weights: deque[int] = deque()
        self.held = 0
        """Bytes the waiting entries weigh together."""
        self._wake: Callable[[], None] | None = None
        self._missed = False
        self.token = COMMITTER
        """The mark on this process's NOTIFYs (see :mod:`services.common.recorders`)."""

    @property
    def is_open(self) -> bool:
        return self._wake is not None

    def open(self, wake: Callable[[], None]) -> None:
        """The relay leads: hand it every commit from now on (``wake`` is called after each)."""
        with self._lock:
            self._clear()
            self._missed = False
            self._wake = wake

    def close(self) -> None:
        with self._lock:
            self._clear()
            self._wake = None

    def _clear(self) -> None:
        self._entries.clear()
        self._weights.clear()
        self.held = 0

    def _pop(self) -> tuple[int, Sequence[Outgoing]]:
        self.held -= self._weights.popleft()
        return self._entries.popleft()

    def committed(self, recordings: Sequence[Recording[Any]], trace: TraceOf | None = None) -> None:
        """One transaction's events were recorded (the writer's thread, right after its commit).
        ``trace`` (tracing on): the context an event's announcements continue, if any; the
        relay's outbox sends each under a span of its own. Nothing of it is stored: what the
        relay reads back from the log starts no span."""
        if self._wake is None or not recordings:
            return
        topics, announce = self._topics, self._announce
        entries = sorted((r.notification.id, announce(r.domain_event)
                          if topics is None or r.notification.topic in topics else ())
                         for r in recordings)
        weights = {r.notification.id: int(len(r.notification.state) * IN_MEMORY_OVERHEAD) for r in recordings}
        if trace is not None:
            contexts = {r.notification.id: trace(r.domain_event) for r in recordings}
            entries = [(position, _traced(items, contexts[position])) for position, items in entries]
        with self._lock:
            wake = self._wake
            if wake is None:
                return
            weight = sum(weights.values())
            if len(self._entries) + len(entries) > self._limit or \
                    (self._max_bytes is not None and self.held + weight > self._max_bytes):
                self._clear()  # the relay is far behind: it reads the log
                self._missed = True
            else:
                self._entries.extend(entries)
                self._weights.extend(weights[position] for position, _ in entries)
                self.held += weight
        wake()

    def missed(self) -> None:
        """A commit of this process may have gone unhanded (its outcome was unknown): the
        relay reads the log from its position before taking anything more."""
        with self._lock:
            self._missed = True
            wake = self._wake
        if wake is not None:
            wake()

    def take(self, after: int, limit: int) -> Batch | None:
        """The handed-off entries that continue position ``after`` (at most ``limit``):
        ``[]`` when nothing is waiting, ``None`` when the next position was not handed off
        here (a gap, or a missed commit): read the log."""
        with self._lock:
            entries = self._entries
            if self._missed:
                self._missed = False
                while entries and entries[0][0] <= after:
                    self._pop()
                return None
            while entries and entries[0][0] <= after:
                self._pop()
            if not entries:
                return []
            batch: Batch = []
            while entries and len(batch) < limit and entries[0][0] == after + 1 + len(batch):
                batch.append(self._pop())
            return batch or None


def _traced(items: Sequence[Outgoing], context: Context | None) -> Sequence[Outgoing]:
    return items if context is None or not items else [(item[0], item[1], context) for item in items]



def _traced(items: Sequence[Outgoing], context: Context | None) -> Sequence[Outgoing]:
    return items if context is None or not items else [(item[0], item[1], context) for item in items]

"""Live frames for SSE clients: the frames this process committed handed over in memory,
the others read from the store once per run per wake-up; either way shared by every client
of that run, on every Delivery instance.

* :class:`Notifier` is the process's hub. Whoever committed a batch (``ViewStore.commit``
  in this process) calls :meth:`Notifier.notify` with the feeds that changed and what it
  committed; batches committed by *other* instances arrive as notifications on the store's
  channel (:class:`~services.delivery.store_wakeups.StoreWakeups`, where the backend has one).
* A :class:`RunFeed` exists per run while at least one client follows it live. **Handed
  off, not read back**: the frames a poll of this process appended to the run, made from
  the rows it wrote (:class:`services.delivery.view_sink.Committed`), are taken at once when
  they follow the feed's cursor (:meth:`RunFeed.take`). The store is read only for what was
  not handed over: a gap, another instance's commit (its notification), a run whose stored
  frames the poll rewrote (a strip after the terminal, a purge), the feed's first read.
* A feed not handed its frames is woken, and is due; the hub's one reader reads the new
  frames of every due feed together (``ViewStore.read_feeds``: one read however many runs
  the batch touched; a read of few runs on the event loop, of many in a worker thread:
  :func:`services.common.subscription.store_work`), each with its SSE bytes made once when
  read back (:func:`services.delivery.sse.read_back`), and hands them to every
  :class:`Subscription` of the run. Wake-ups that arrive during a read coalesce into one
  more read.
* The store stays the single source of frames: a client reads its backlog (a resume,
  a new client replaying from 1, a gap, a subscription that overflowed) from the store,
  and follows the feed only from where it caught up. Frame ids are dense per run, so a
  client recognises a gap or a duplicate by id alone, and so does a feed: whether read
  back or handed over, it hands its clients only the frames after its cursor.
* A lost wake-up (a dropped ``LISTEN`` connection, a notification sent while this
  process was not listening) is caught by one fallback query per ``poll_interval`` for
  *all* live runs together (``ViewStore.heads``), never one query per client.
* Tracing on, a frame read or handed over with the ``traceparent`` of the span that
  appended it is handed to the clients inside a ``delivery sse send`` span under that span (:meth:`Notifier.sending`): one
  per frame and feed, however many clients follow the run.

A conversation's notices (D7, :mod:`services.delivery.notices`) are feeds of the same hub:
their keys (``notice_feed``) are never a run's, their reads go to the notices' source, and a
poll that writes a notice names its feed among those it changed.

``version``/``wait`` remain the process-local wake-up primitive (loss-free: read the
version, then wait only while it is unchanged)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentelemetry.trace import Span, SpanKind, Tracer

from imprint.delivery.frames import Frame
from imprint.runtime import tracecontext
from services.common.observability import get_logger
from services.common.subscription import store_work

log = get_logger(__name__)


@dataclass(frozen=True)
class FeedRead:
    """What a live feed reads after a wake-up: new frames and where the feed stands."""

    frames: list[Frame]
    exists: bool
    deleted: bool
    terminal: bool
    last_frame_id: int


class FeedSource(Protocol):
    """Where feeds read their frames: a run's (:class:`services.delivery.view_store.ViewStore`)
    or a conversation's notices (:class:`services.delivery.notices.NoticeFeeds`)."""

    def read_feeds(self, cursors: Mapping[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        """Each feed's frames after its cursor (at most ``limit``), and where it stands: one read for all."""
        ...

    def heads(self, keys: Sequence[str]) -> dict[str, tuple[int, bool]]:
        """``{key: (last frame id, deleted)}``: the fallback check when no wake-up arrived."""
        ...


class Handed(Protocol):
    """What a poll of this process committed, handed to its feeds in memory
    (:class:`services.delivery.view_sink.Committed`)."""

    def frames(self, key: str) -> Sequence[Frame] | None:
        """The frames committed to the feed ``key``, in id order (``None``: none handed over)."""
        ...


class Subscription:
    """One client's place on a run's feed: frames handed over since it last looked."""

    def __init__(self, feed: RunFeed, limit: int) -> None:
        self.feed = feed
        self.limit = limit
        self.floor = feed.cursor
        """The feed had read every frame up to here before this subscription: read those from the store."""
        self.frames: deque[Frame] = deque()
        self.lagged = False
        """More frames were handed over than ``limit`` while the client was busy: they were
        dropped here, read them from the store."""
        self.ended: str | None = None
        self.error: BaseException | None = None
        self._poked = False
        self._event = asyncio.Event()

    def offer(self, frames: list[Frame]) -> None:
        if len(self.frames) + len(frames) > self.limit:
            self.frames.clear()
            self.lagged = True
        else:
            self.frames.extend(frames)
        self._event.set()

    def end(self, reason: str) -> None:
        self.ended = reason
        self._event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._event.set()

    def poke(self) -> None:
        """Make the waiting :meth:`next` return, with no frames (a stream's keep-alive is due)."""
        self._poked = True
        self._event.set()

    async def next(self) -> list[Frame]:
        """The frames handed over since the last call (waits for some, an end, a lag or a poke)."""
        while (not self.frames and not self.lagged and self.ended is None and self.error is None
               and not self._poked):
            self._event.clear()
            await self._event.wait()
        self._poked = False
        if self.error is not None:
            raise self.error
        out = list(self.frames)
        self.frames.clear()
        return out

    def close(self) -> None:
        self.feed.leave(self)


class RunFeed:
    """A run's live frames for every subscription of this process, read by the hub."""

    def __init__(self, hub: Notifier, run_id: str, store: FeedSource, cursor: int) -> None:
        self.hub = hub
        self.run_id = run_id
        self.store = store
        self.cursor = cursor
        self.subscriptions: set[Subscription] = set()
        self.closed = False
        self.reads = 0
        self.wake()  # the first read: anything committed since the first client caught up

    def wake(self) -> None:
        if not self.closed:
            self.hub._due_feed(self)

    def leave(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)
        if not self.subscriptions:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub._forget(self)

    def deliver(self, read: FeedRead, page: int) -> None:
        """Hand one read's frames to every subscription; a full page makes the feed due again."""
        self.reads += 1
        self._hand([frame for frame in read.frames if frame.id > self.cursor])
        if len(read.frames) >= page:
            self.wake()
        elif not read.exists or read.deleted:
            for subscription in list(self.subscriptions):
                subscription.end("gone")

    def take(self, frames: Sequence[Frame]) -> bool:
        """Frames a poll of this process committed, handed over without a read: every
        subscription is handed those after the cursor. ``False`` when they do not follow it
        (frames in between are still to be read: another instance's, a page not read yet):
        the feed then reads the store."""
        fresh = [frame for frame in frames if frame.id > self.cursor]
        if fresh and fresh[0].id != self.cursor + 1:
            return False
        self._hand(fresh)
        return True

    def _hand(self, frames: list[Frame]) -> None:
        """Frames that follow the cursor, to every subscription: one object per frame for every
        client, its SSE event made once. Read back or handed over, no frame is handed twice."""
        if frames:
            self.cursor = frames[-1].id
            subscriptions = list(self.subscriptions)
            sending = [] if self.hub.tracer is None else self.hub.sending(frames, len(subscriptions))
            for subscription in subscriptions:
                subscription.offer(frames)
            for span in sending:
                span.end()

    def fail(self, error: BaseException) -> None:
        for subscription in list(self.subscriptions):
            subscription.fail(error)
        self.close()


class Notifier:
    """The process's live-frame hub: per-run feeds, local and remote wake-ups, the fallback."""

    def __init__(self, *, poll_interval: float = 1.0, page: int = 500, buffer_limit: int = 10_000,
                 tracer: Tracer | None = None, inline_reads: int = 0) -> None:
        """``inline_reads``: a read of at most this many feeds runs on the event loop, a
        larger one in a worker thread (``IMPRINT_INLINE_POLL_RECORDS``,
        :func:`services.common.subscription.store_work`)."""
        self.tracer = tracer
        self.inline_reads = inline_reads
        """Tracing on: a ``delivery sse send`` span per traced frame a feed hands over (:meth:`sending`)."""
        self.poll_interval = poll_interval
        self.page = page
        self.buffer_limit = buffer_limit
        self.feeds: dict[str, RunFeed] = {}
        self._sequence = 0
        self._versions: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: asyncio.Task[None] | None = None
        self._due: dict[str, RunFeed] = {}
        """Feeds woken since the reader last took them."""
        self._reader: asyncio.Task[None] | None = None
        self._reading = asyncio.Event()

    def bind(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Remember the event loop, for :meth:`notify_threadsafe`."""
        self._loop = loop or asyncio.get_running_loop()

    @property
    def bound(self) -> bool:
        return self._loop is not None

    # -------------------------------------------------------------- live feeds

    def subscribe(self, run_id: str, store: FeedSource, position: int, limit: int | None = None) -> Subscription:
        """Follow ``run_id`` live from ``position`` (the last frame the client holds from
        the store). Frames up to ``subscription.floor`` must be read from the store. At
        most ``limit`` frames (default: the hub's ``buffer_limit``) wait for the client;
        past that it is marked lagged and reads them from the store."""
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = RunFeed(self, run_id, store, position)
            if self._poller is None or self._poller.done():
                self._poller = asyncio.get_running_loop().create_task(self._poll(), name="run-feed-fallback")
        subscription = Subscription(feed, self.buffer_limit if limit is None else max(1, limit))
        feed.subscriptions.add(subscription)
        return subscription

    def _forget(self, feed: RunFeed) -> None:
        if self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]
        if self._due.get(feed.run_id) is feed:
            del self._due[feed.run_id]

    def _due_feed(self, feed: RunFeed) -> None:
        self._due[feed.run_id] = feed
        self._reading.set()
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read(), name="run-feed-reader")

    async def _read(self) -> None:
        """The one reader of every feed: take the due feeds, read them in one store read
        per store (in a worker thread), deliver; feeds woken meanwhile wait for the next."""
        while True:
            await self._reading.wait()
            self._reading.clear()
            while self._due:
                due, self._due = self._due, {}
                by_store: dict[int, list[RunFeed]] = {}
                for feed in due.values():
                    by_store.setdefault(id(feed.store), []).append(feed)
                for feeds in by_store.values():
                    try:
                        reads = await store_work(len(feeds), self.inline_reads, feeds[0].store.read_feeds,
                                                 {feed.run_id: feed.cursor for feed in feeds}, self.page)
                    except Exception as error:
                        log.error("run feed read failed", runs=len(feeds), error=repr(error))
                        for feed in feeds:
                            feed.fail(error)
                        continue
                    for feed in feeds:
                        if not feed.closed:
                            feed.deliver(reads[feed.run_id], self.page)

    def sending(self, frames: list[Frame], subscribers: int) -> list[Span]:
        """The spans of handing these frames to a feed's clients: one per frame that names the
        span which appended it, under that span, whatever the number of clients (a span per
        client and frame would multiply each frame's cost by its clients, and the SDK's export
        queue drops what overflows it: a run's trace would lose spans at random). Ids and
        counts only (X9)."""
        assert self.tracer is not None
        spans = []
        for frame in frames:
            parent = tracecontext.extract(((tracecontext.TRACEPARENT, frame.trace),)) if frame.trace else None
            if parent is not None:
                spans.append(self.tracer.start_span("delivery sse send", context=parent, kind=SpanKind.PRODUCER,
                                                    attributes=tracecontext.id_attributes({
                                                        "run_id": frame.run_id, "frame_id": frame.id,
                                                        "subscribers": subscribers})))
        return spans

    def subscribers(self) -> int:
        return sum(len(f.subscriptions) for f in self.feeds.values())

    def wake_all(self) -> None:
        for feed in list(self.feeds.values()):
            feed.wake()

    async def _poll(self) -> None:
        """The fallback for a lost wake-up: one query for every live feed of a source (the
        runs; the conversations' notices), per interval."""
        while self.feeds:
            await asyncio.sleep(self.poll_interval)
            by_store: dict[int, list[RunFeed]] = {}
            for feed in self.feeds.values():
                by_store.setdefault(id(feed.store), []).append(feed)
            if not by_store:
                return
            for feeds in by_store.values():
                try:
                    heads = await asyncio.to_thread(feeds[0].store.heads, [f.run_id for f in feeds])
                except Exception as error:  # the feeds' own reads report a store that stays down
                    log.warning("run feed fallback check failed", error=repr(error))
                    continue
                for feed in feeds:
                    head = heads.get(feed.run_id)
                    if head is None or head[1] or head[0] > feed.cursor:
                        feed.wake()

    # -------------------------------------------------------------- wake-ups

    def version(self, run_id: str) -> int:
        return self._versions.get(run_id, 0)

    def notify(self, run_ids: Iterable[str], handed: Handed | None = None) -> None:
        """These feeds changed; ``handed``: what this process's poll committed to them, taken
        without a read by each feed it follows on (:meth:`RunFeed.take`), the others woken.
        Call on the event loop's thread."""
        for run_id in run_ids:
            self._sequence += 1
            self._versions[run_id] = self._sequence
            for event in self._waiters.get(run_id, ()):
                event.set()
            feed = self.feeds.get(run_id)
            if feed is not None and not feed.closed:
                frames = None if handed is None else handed.frames(run_id)
                if frames is None or not feed.take(frames):
                    feed.wake()
        if len(self._versions) > 50_000:  # forget quiet runs; a waiter just re-reads the store
            for run_id in [r for r in self._versions if r not in self._waiters][:25_000]:
                del self._versions[run_id]

    def notify_threadsafe(self, run_ids: Iterable[str], handed: Handed | None = None) -> None:
        """Call from a worker thread (e.g. right after ``commit()`` in ``to_thread``)."""
        ids = list(run_ids)
        if self._loop is None or self._loop.is_closed():
            return  # nobody can be waiting on a loop that was never bound
        self._loop.call_soon_threadsafe(self.notify, ids, handed)

    async def wait(self, run_id: str, seen: int, timeout: float) -> int:
        """Return once ``version(run_id) != seen`` or after ``timeout`` seconds."""
        if self.version(run_id) != seen:
            return self.version(run_id)
        event = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[run_id]
        return self.version(run_id)

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def close(self) -> None:
        tasks = [task for task in (self._reader, self._poller) if task is not None]
        for feed in list(self.feeds.values()):
            feed.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

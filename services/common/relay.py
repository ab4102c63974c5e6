"""The relay: a committed eventsourcing log → Kafka, one mechanism for every log.

The Publication log (``imprint serve publication-relay``, ``services.publication.relay``)
and the Journal log (``imprint serve journal-relay``, or inside ``imprint serve journal``,
``services.journal.relay``) each run it with their own announcer.

* It reads the application's notification log in order, in batches of up to
  ``batch_size`` positions, maps each committed event to what it announces (decoding,
  and opening sealed bodies, in a worker thread: never on the event loop), produces the
  whole batch (sent in order, confirmed together: one flush per batch, the producer's
  linger batches the sends) and only then records the batch's last position as an
  eventsourcing tracking record (``relay→<topic>``) in the application's own database.
  The next batch is read while the current one is being produced, and a record is
  written while the next batch is produced (in order: a record waits for the one
  before it), so a batch costs the broker's round trip, not that plus a commit.
* **A record per interval, not per batch.** The position is recorded once
  :data:`RECORD_SECONDS` have passed since the last record (and when the relay stops
  or the log has been quiet that long), not after every batch: under a steady trickle a
  batch is one proposal's events, and a tracking commit per batch was a transaction and
  a WAL flush per proposal beside Publication's own. A crash re-sends at most that
  interval's batches, with their deterministic ``event_id``\\ s, as it re-sends the
  unrecorded last batch.
* **Only what it announces.** A relay given the stored topics of the events its
  announcer maps (``topics``) decodes only those; the others cover their positions and
  announce nothing. The Journal's log is mostly effects and grants, and each of them was
  decoded and, after every journal poll, followed by a tracking commit: a batch that
  announces nothing is recorded only every :data:`UNRECORDED_SPAN` positions, so a
  restart reads again at most that many positions, none of which is sent.
* **Handed off, not read back** (:class:`Handoff`). A relay running in the process that
  writes the log (``imprint serve publication``, ``imprint serve journal``) is handed each
  commit's announcements in memory, built from the events just recorded: it produces
  them without reading the log back, decoding it or opening its seals again. It still
  reads the log, from its position, whenever the next position was not handed off: a
  commit of another process (its NOTIFY carries another committer's mark), a gap, a
  commit whose outcome was unknown, a relay that just took over, and after a quiet spell
  as a safety net (:data:`NOTIFIED_CHECK_SECONDS`; without NOTIFY, a poll that slows to
  :data:`HANDED_CHECK_SECONDS` while nothing is found).
* **Not notified while handed off.** While its hand-off is open the writer's commits send
  no ``NOTIFY`` (the PostgreSQL recorder's ``handed_off``, wired by :func:`relay_for`):
  each woke this process's listening thread (a turn at the GIL beside the commit) and the
  server's notification queue for a payload the listener dropped. A standby reads the log
  from the recorded position as it takes over, and a relay whose hand-off closes notifies
  once (:data:`STOOD_DOWN`); a commit in flight just then waits for the next ``NOTIFY``.
* A crash between the broker's acknowledgement and the tracking record re-sends the
  last batch with the same deterministic ``event_id``\\ s; consumers dedupe by
  ``event_id``. Nothing committed is skipped.
* **Failover** (several relay processes per log): exactly one is active, elected
  through :class:`~services.common.election.Election` — a PostgreSQL advisory lock
  held on a dedicated session, or a file lock for SQLite. A standby polls for the lock;
  when the active relay dies its session ends, the lock is free, and the standby
  resumes from the recorded position. Before reading a batch the active relay checks
  that its lock session is still alive (at most every :data:`LEADERSHIP_CHECK_SECONDS`,
  not a round trip per batch), and a tracking record that does not advance (another
  relay already recorded it) makes it step down. Even two relays
  producing at once could only re-send: each produces in log order from a recorded
  position that the other had already acknowledged on the topic, so the first copy of
  every event still arrives in log order.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, ProcessRecorder, StoredEvent, Tracking
from opentelemetry.trace import Tracer

from services.common.backends import backend_for
from services.common.election import Election, NoElection
from services.common.handoff import Announce, Batch, Handoff
from services.common.kafka import Outbox, Outgoing
from services.common.observability import get_logger
from services.common.settings import Settings
from services.common.wakeups import ChannelListener

ToEvents = Callable[[Sequence[StoredEvent]], list[Any]]
"""Stored events (the notifications a relay reads are stored events too) → domain events, a
batch at a time: a log whose bodies are sealed opens them here, once per event, with one key
lookup per batch (:class:`services.publication.sealing.BatchOpener`)."""
log = get_logger(__name__)


UNRECORDED_SPAN = 10_000
"""How far a relay's position may run ahead of its record over batches that announced
nothing (re-read after a restart, and nothing of them sent again)."""
RECORD_SECONDS = 0.25
"""How long a produced batch's position may wait for its record (a crash re-sends at most
that long's batches)."""
LEADERSHIP_CHECK_SECONDS = 1.0
"""How long a relay trusts its lock session between two checks of it (checked before a
batch is read: a quiet relay reads nothing and checks nothing)."""
NOTIFIED_CHECK_SECONDS = 30.0
"""With NOTIFY (PostgreSQL): how long a quiet relay trusts the notifications before it
reads the log itself. Every commit notifies and every reconnect of the listener makes the
relay read, so this read is only a safety net: a relay reading every second was two
statements a second per log with nothing to say."""
HANDED_CHECK_SECONDS = 1.0
"""With a hand-off but no NOTIFY (SQLite, one writer per store): the longest a quiet relay
goes without reading its log. The writer's own commits are handed to it at once; a commit
of another process (a tool) is read by this poll, which starts at ``idle_seconds`` after
anything was relayed and doubles while nothing is found, up to this."""


STOOD_DOWN = "stood-down"
"""The ``NOTIFY`` payload of a relay whose hand-off closed: no process's mark, so every relay reads at it."""


class Publisher(Protocol):
    async def publish_many(self, items: Iterable[Outgoing]) -> None: ...


class LostLeadership(Exception):
    """This relay is no longer the elected one: stop producing, campaign again."""


class Relay:
    def __init__(
        self,
        app: Application[Any],
        announce: Announce,
        outbox: Publisher,
        *,
        name: str,
        to_events: ToEvents | None = None,
        batch_size: int = 1000,
        idle_seconds: float = 0.05,
        wakeups: ChannelListener | None = None,
        election: Election | None = None,
        topics: Sequence[str] = (),
        handoff: Handoff | None = None,
        starts_outbox: bool = False,
    ) -> None:
        """``starts_outbox``: ``outbox`` is this relay's own (an :class:`Outbox`), started and
        stopped by :meth:`run`; otherwise its owner runs it."""
        assert isinstance(app.recorder, ProcessRecorder), "the relay records its position beside the log"
        self._app = app
        self._recorder: ProcessRecorder = app.recorder
        self._announce = announce
        self._to_events: ToEvents = to_events or (lambda batch: [app.mapper.to_domain_event(n) for n in batch])
        self._outbox = outbox
        self._producer: Outbox | None = None
        if starts_outbox:
            assert isinstance(outbox, Outbox), "a relay starts only an outbox of its own"
            self._producer = outbox
        self.name = name
        self._batch_size = batch_size
        self._idle_seconds = idle_seconds
        self.position = 0
        self._stopping = asyncio.Event()
        self._stopped = threading.Event()  # the same, for the election's thread
        self._wakeups = wakeups
        self._wake = asyncio.Event()
        self._election: Election = election or NoElection()
        self._topics = frozenset(topics) or None
        """The stored topics of the events ``announce`` maps (``None``: decode every event)."""
        self.active = False
        self._leading_checked = -LEADERSHIP_CHECK_SECONDS
        """``time.monotonic()`` of the last check that the lock session was alive."""
        self._handoff = handoff
        self._log_unread = True
        """The log may hold commits past the position that were not handed off."""

    def recorded_position(self) -> int:
        return self._recorder.max_tracking_id(self.name) or 0

    def _read(self, after: int, *, handed_checked: bool = False) -> Batch:
        """One batch, mapped to its announcements. Runs in a worker thread.
        ``handed_checked``: the loop asked the hand-off already (:meth:`_from_handoff`)."""
        now = time.monotonic()
        if now - self._leading_checked >= LEADERSHIP_CHECK_SECONDS:
            if not self._election.still_leading():
                raise LostLeadership(self.name)
            self._leading_checked = now
        if not handed_checked:
            handed = self._from_handoff(after)
            if handed is not None:
                return handed
        self._log_unread = False  # before the read: a commit heard from now on is read next time
        notifications = self._recorder.select_notifications(start=after + 1, limit=self._batch_size)
        if len(notifications) == self._batch_size:
            self._log_unread = True
        topics = self._topics
        wanted = notifications if topics is None else [n for n in notifications if n.topic in topics]
        announced = dict(zip((n.id for n in wanted), map(self._announce, self._to_events(wanted)), strict=True))
        return [(n.id, announced.get(n.id, ())) for n in notifications]

    def _from_handoff(self, after: int) -> Batch | None:
        """What the hand-off answers for the batch after ``after``: its entries, ``[]`` when
        nothing is waiting and the log holds nothing unread, ``None`` when the log must be read."""
        if self._handoff is None or not self._handoff.is_open:
            return None
        handed = self._handoff.take(after, self._batch_size)
        if handed:
            return handed
        if handed is not None and not self._log_unread:
            return []
        return None

    def _next(self, after: int) -> asyncio.Future[Batch]:
        """The batch after ``after``. Taken on the loop when the hand-off has it and the lock
        session was checked within :data:`LEADERSHIP_CHECK_SECONDS`: a trip to a worker
        thread and back, twice per commit (the batch, then the read-ahead that finds
        nothing), made three threads take turns at the GIL with the commits' own. A
        database read — the log, or the lock session's check — goes to a worker thread."""
        if time.monotonic() - self._leading_checked < LEADERSHIP_CHECK_SECONDS:
            handed = self._from_handoff(after)
            if handed is not None:
                taken: asyncio.Future[Batch] = asyncio.get_running_loop().create_future()
                taken.set_result(handed)
                return taken
            return asyncio.ensure_future(asyncio.to_thread(self._read, after, handed_checked=True))
        return asyncio.ensure_future(asyncio.to_thread(self._read, after))

    def _first_quiet_wait(self) -> float:
        """How long the relay waits, once the log has nothing more, before it reads the log
        itself: the commits it is woken for (NOTIFY, the hand-off) need no read of their own."""
        if self._wakeups is not None:
            return NOTIFIED_CHECK_SECONDS
        return self._idle_seconds

    def _next_quiet_wait(self, waited: float) -> float:
        """After a wait that ended with nothing: a relay handed its writer's commits polls
        for other writers less and less often (up to :data:`HANDED_CHECK_SECONDS`); one
        with no other wake-up keeps polling every ``idle_seconds``."""
        if self._wakeups is None and self._handoff is not None:
            return min(max(waited * 2, self._idle_seconds), HANDED_CHECK_SECONDS)
        return waited

    def _heard(self, committer: str | None) -> None:
        """A commit to the log (its committer's mark; ``None``: commits may have been missed)."""
        if committer is None or not self._handed_off(committer):
            self._log_unread = True
            self._wake.set()

    def _handed_off(self, committer: str) -> bool:
        """Whether a commit by ``committer`` was handed to this relay already: this process's
        own, while the hand-off is open (any thread may ask)."""
        handoff = self._handoff
        return handoff is not None and handoff.is_open and committer == handoff.token

    def _record(self, position: int) -> None:
        try:
            self._recorder.insert_tracking(Tracking(self.name, position))
        except IntegrityError as error:  # another relay recorded this position (or a later one)
            raise LostLeadership(self.name) from error

    async def _send(self, batch: Batch) -> int:
        """Produce a batch (acknowledged); its last log position, to record."""
        await self._outbox.publish_many(item for _, items in batch for item in items)
        return batch[-1][0]

    async def _produce(self, batch: Batch) -> None:
        last = await self._send(batch)
        await asyncio.to_thread(self._record, last)
        self.position = last

    async def relay_once(self) -> int:
        """Relay one batch; returns how many log positions it covered."""
        batch = await asyncio.to_thread(self._read, self.position)
        if batch:
            await self._produce(batch)
        return len(batch)

    async def _lead(self) -> None:
        """Relay while elected: read ahead one batch while the current one is produced;
        record the position every :data:`RECORD_SECONDS` (see the module's docstring)."""
        self._leading_checked = -LEADERSHIP_CHECK_SECONDS  # a new term starts with a check
        self._log_unread = True  # and reads the log from its recorded position
        self.position = recorded = await asyncio.to_thread(self.recorded_position)
        log.info("relay active", relay=self.name, position=self.position, notified=self._wakeups is not None)
        loop = asyncio.get_running_loop()
        idle = self._first_quiet_wait()
        if self._handoff is not None:
            self._handoff.open(self._waker(loop))
        self._wake.clear()
        pending = self._next(self.position)
        recording: asyncio.Future[None] | None = None
        """The last record, written while the next batch is produced; records are written
        in order, and each one's failure (another relay recorded it: step down) surfaces
        before the next is written."""
        owed = False
        """A produced batch announced something since the last record."""
        recorded_at = loop.time()

        async def record(position: int) -> None:
            nonlocal recording, recorded, recorded_at, owed
            if recording is not None:
                await recording
            recording = asyncio.ensure_future(asyncio.to_thread(self._record, position))
            recorded, recorded_at, owed = position, loop.time(), False

        lost = False
        try:
            while not self._stopping.is_set():
                batch = await pending
                if not batch:
                    if recording is not None:
                        await recording
                        recording = None
                    # Quiet: wait for the log to grow, but no longer than the owed record may wait.
                    wait = min(idle, max(0.0, recorded_at + RECORD_SECONDS - loop.time())) if owed else idle
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait)
                    except TimeoutError:
                        if owed:
                            await record(self.position)
                        elif wait >= idle:
                            self._log_unread = True  # quiet for a while: look at the log itself
                            idle = self._next_quiet_wait(idle)
                    self._wake.clear()
                    pending = self._next(self.position)
                    continue
                idle = self._first_quiet_wait()
                self._wake.clear()
                pending = self._next(batch[-1][0])
                last = await self._send(batch)
                self.position = last
                owed = owed or any(items for _, items in batch)
                if (owed and loop.time() - recorded_at >= RECORD_SECONDS) or last - recorded >= UNRECORDED_SPAN:
                    await record(last)
        except LostLeadership:
            lost = True
            raise
        finally:
            if self._handoff is not None:
                self._handoff.close()
                await self._stood_down()
            if not pending.done():
                pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            if recording is not None:
                await recording  # what was acknowledged is recorded before standing down
            if owed and not lost:
                await asyncio.to_thread(self._record, self.position)

    def _waker(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """The hand-off's call after a commit: at once on the loop, through its self-pipe from a thread."""
        wake, on_the_loop = self._wake, threading.get_ident()
        return lambda: wake.set() if threading.get_ident() == on_the_loop else loop.call_soon_threadsafe(wake.set)

    async def _stood_down(self) -> None:
        """The hand-off closed: one ``NOTIFY`` for the commits it took unnotified."""
        try:
            if self._wakeups is not None:
                await asyncio.to_thread(self._wakeups.wake_all, STOOD_DOWN)
        except Exception as error:  # noqa: BLE001 — the store is unreachable: so are its commits
            log.warning("relay could not notify its log as it stood down", relay=self.name, error=type(error).__name__)

    async def run(self) -> None:
        if self._producer is not None:
            await self._producer.start()
        if self._wakeups is not None:
            self._wakeups.start(asyncio.get_running_loop(), self._heard, self._handed_off)
        try:
            while not self._stopping.is_set():
                if not self.active:
                    log.info("relay standing by", relay=self.name)
                    if not await asyncio.to_thread(self._election.campaign, self._stopped):
                        break
                    self.active = True
                try:
                    await self._lead()
                except LostLeadership:
                    log.warning("relay lost its election; standing by", relay=self.name, position=self.position)
                    self.active = False
                    await asyncio.to_thread(self._election.resign)
                except Exception:
                    log.exception("relay batch failed; retrying", relay=self.name, position=self.position)
                    await asyncio.sleep(1.0)
        finally:
            if self.active:
                self.active = False
                await asyncio.to_thread(self._election.resign)
            if self._producer is not None:
                await self._producer.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._stopped.set()
        self._wake.set()
        if self._wakeups is not None:
            self._wakeups.stop()


def relay_for(settings: Settings, app: Application[Any], announce: Announce, *, name: str,
              to_events: ToEvents | None = None, topics: Sequence[str] = (), handoff: Handoff | None = None,
              tracer: Tracer | None = None) -> Relay:
    """The relay of one log in this deployment, with its own producer (sending what the
    hand-off traced under ``tracer``'s spans), its backend's wake-ups and election
    (:mod:`services.common.backends`)."""
    backend = backend_for(settings)
    outbox = Outbox(settings, f"imprint-relay-{app.name.lower()}", tracer=tracer)
    if (wakeups := backend.log_wakeups(app.recorder)) is not None and handoff is not None:
        app.recorder.handed_off = lambda: handoff.is_open  # type: ignore[attr-defined]  # no NOTIFY then
    return Relay(app, announce, outbox, name=name, to_events=to_events, wakeups=wakeups,
                 election=backend.election(name), topics=topics, handoff=handoff, starts_outbox=True)

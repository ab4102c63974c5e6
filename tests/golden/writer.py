"""Today's Publication log and Journal, written in this process as their consumers write
them: each poll goes through ``PublicationLog.process`` and ``RuntimeJournal.process``
(real stores, real sealing, real tracking records), and what the Publication log
committed is announced (the relay's announcer, over the log's own notifications) and
fed to the Journal on ``imprint.publication.v1``, as its consumer would read it.

No relay runs here and nothing reaches Kafka: a golden log holds no relay position, so
whoever serves it later relays it from the start.

Two things are pinned so the log reads the same on every backend: the clock the log's
events take their timestamps from (eventsourcing's ``datetime_now_with_tzinfo``) and
each inbound message's ``event_id``/``occurred_at``. A commit whose outcome is lost or
refused is made to happen at a chosen poll (:meth:`Writer.fail_next_commit`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import eventsourcing.application
import eventsourcing.domain
from eventsourcing.persistence import DataError, OperationalError

from imprint.contracts.base import Message
from imprint.contracts.registry import topic_of
from imprint.contracts.topics import Topic
from imprint.publication import announce
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.journal.application import open_journal
from services.publication.application import open_log
from services.publication.sealing import BatchOpener
from tests.support.feeder import Feeder

MESSAGE_IDS = uuid.UUID("6f1d2c3b-4a59-5e68-9d7c-8b0a1f2e3d4c")


class Clock:
    """The time every event of the log is stamped with; moved on by each poll."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@contextmanager
def pinned(clock: Clock) -> Iterator[Clock]:
    """eventsourcing stamps events (and snapshots) through this one function."""
    saved = eventsourcing.domain.datetime_now_with_tzinfo, eventsourcing.application.datetime_now_with_tzinfo
    eventsourcing.domain.datetime_now_with_tzinfo = clock  # type: ignore[assignment]
    eventsourcing.application.datetime_now_with_tzinfo = clock  # type: ignore[assignment]
    try:
        yield clock
    finally:
        eventsourcing.domain.datetime_now_with_tzinfo, eventsourcing.application.datetime_now_with_tzinfo = saved


class Writer:
    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.clock = clock
        self.app = open_log(settings)
        self.journal = open_journal(settings)
        self.publication_feed: Feeder[None] = Feeder(self._publish, resume=self._resume(self.app.position))
        self.journal_feed: Feeder[None] = Feeder(self.journal.process, resume=self._resume(self.journal.sink.position))
        self.emitted: list[Message] = []
        """What Publication emitted itself (previews, save-unknowns): never in its log."""
        self._announced = 0
        self._polls = 0
        self._fault: str | None = None

    @staticmethod
    def _resume(position: Any) -> Any:
        return lambda topic, partition: position(f"{topic}#{partition}") + 1

    def _publish(self, batch: list[Inbound]) -> None:
        self.app.process(batch, lambda items: self.emitted.extend(message for _, message in items))

    def poll(self, *messages: Message, partition: int = 0) -> None:
        """One consumer poll of ``messages`` (one topic, one ``partition``), for Publication and
        then the Journal; then the Journal reads what Publication committed."""
        self._polls += 1
        at = self.clock.tick()
        stamped = [m.model_copy(update={"event_id": uuid.uuid5(MESSAGE_IDS, f"{self._polls}:{i}"), "occurred_at": at})
                   for i, m in enumerate(messages)]
        assert len({topic_of(m) for m in stamped}) == 1, "one topic per poll"
        batch = self.publication_feed.wrap(*stamped, partition=partition)
        try:
            self.publication_feed.process(batch)
        except DataError:  # the refused commit left its failure fact; the consumer redelivers the poll
            self.publication_feed.process(batch)
        self.journal_feed.send(*stamped, partition=partition)
        self.announce_to_journal()

    def announce_to_journal(self) -> None:
        notifications = self.app.recorder.select_notifications(start=self._announced + 1, limit=10_000)
        if not notifications:
            return
        self._announced = notifications[-1].id
        events = BatchOpener(self.app.mapper, self.app.keyring)(notifications)
        messages = [m for m in map(announce, events) if m is not None]
        if messages:
            self.clock.tick()
            self.journal_feed.send(*messages, topic=Topic.PUBLICATION)

    @contextmanager
    def fail_next_commit(self, how: str) -> Iterator[None]:
        """``"unknown"``: the next commit of a poll happens, then its connection is lost
        before the outcome is read (P15 save-unknown). ``"refused"``: the database refuses
        it outright (a save failure). Other writes pass untouched."""
        recorder = self.app.recorder
        insert = recorder.insert_events

        def faulty(stored_events: Any, **kwargs: Any) -> Any:
            if self._fault is None or not (kwargs.get("tracking") or kwargs.get("trackings")):
                return insert(stored_events, **kwargs)
            fault, self._fault = self._fault, None
            if fault == "refused":
                raise DataError("value out of range (injected)")
            insert(stored_events, **kwargs)
            raise OperationalError("server closed the connection after COMMIT (injected)")

        self._fault = how
        recorder.insert_events = faulty  # type: ignore[method-assign]
        try:
            yield
            assert self._fault is None, f"no commit to fail ({how})"
        finally:
            del recorder.insert_events
            self._fault = None

    def close(self) -> None:
        self.app.close()
        self.journal.close()

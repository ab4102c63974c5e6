"""Reads an eventsourcing application's notification log in order and produces what
each committed event announces, with an idempotent producer.

Its position is an eventsourcing tracking record in the application's own
database (``relay→<topic>``), written after the broker acknowledged the batch.
A crash between the two re-sends the last batch with the same deterministic
``event_id``s; consumers dedupe by ``event_id``. Nothing committed is skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import ProcessRecorder, Tracking

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from services.common.observability import get_logger
from services.common.kafka import Outbox
from services.relay.wakeups import LogWakeups

Announce = Callable[[Any], Sequence[tuple[Topic, Message]]]
log = get_logger(__name__)


class Relay:
    def __init__(
        self,
        app: Application[Any],
        announce: Announce,
        outbox: Outbox,
        *,
        name: str,
        batch_size: int = 500,
        idle_seconds: float = 0.05,
        wakeups: LogWakeups | None = None,
    ) -> None:
        assert isinstance(app.recorder, ProcessRecorder), "the relay records its position beside the log"
        self._app = app
        self._recorder: ProcessRecorder = app.recorder
        self._announce = announce
        self._outbox = outbox
        self.name = name
        self._batch_size = batch_size
        self._idle_seconds = idle_seconds
        self.position = 0
        self._stopping = asyncio.Event()
        self._wakeups = wakeups
        self._wake = asyncio.Event()

    def recorded_position(self) -> int:
        return self._recorder.max_tracking_id(self.name) or 0

    def _read(self, after: int) -> list[tuple[int, Sequence[tuple[Topic, Message]]]]:
        notifications = self._recorder.select_notifications(start=after + 1, limit=self._batch_size)
        return [(n.id, self._announce(self._app.mapper.to_domain_event(n))) for n in notifications]

    async def relay_once(self) -> int:
        """Relay one batch; returns how many log positions it covered."""
        batch = await asyncio.to_thread(self._read, self.position)
        if not batch:
            return 0
        await self._outbox.publish_many(item for _, items in batch for item in items)
        last = batch[-1][0]
        await asyncio.to_thread(self._recorder.insert_tracking, Tracking(self.name, last))
        self.position = last
        return len(batch)

    async def run(self) -> None:
        self.position = await asyncio.to_thread(self.recorded_position)
        log.info("relay resuming", relay=self.name, position=self.position, notified=self._wakeups is not None)
        idle = self._idle_seconds
        if self._wakeups is not None:
            self._wakeups.start(asyncio.get_running_loop(), self._wake)
            idle = 1.0  # woken by NOTIFY; the timeout is only a safety net
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if await self.relay_once():
                    continue
            except Exception:
                log.exception("relay batch failed; retrying", relay=self.name, position=self.position)
                await asyncio.sleep(1.0)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), idle)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._wakeups is not None:
            self._wakeups.stop()

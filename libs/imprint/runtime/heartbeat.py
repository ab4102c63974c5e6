"""X10: heartbeats while a model or tool call is in flight (pure asyncio: no I/O of its own).

The Journal closes a run none of whose runtime messages reached it for the run lease
(``IMPRINT_RUN_LEASE_SECONDS``, 120 s by default) as ``failed``/``runtime_lost``. Any
message renews the lease, but a model call or a tool call can be silent for longer.
:class:`Heartbeats` keeps the run's writer from falling silent while such a call is in
flight: one background task per run, alive while at least one call is (parallel tool
calls share it), sends ``run.heartbeat`` whenever the writer has sent nothing for
``every`` seconds — so a run that is already talking sends no heartbeat at all.

The default, 30 s, gives four heartbeats per default lease: one lost or slow send does not
lose the run. Keep ``every`` well under the deployment's lease. A heartbeat that fails to
send is logged and tried again after ``every``; it never fails the call it accompanies,
and leaving the call stops the task without waiting for a send in flight.

    beats = Heartbeats(writer)
    async with beats.during("tool"):
        await long_search()

(:class:`~imprint.runtime.pydantic_ai.AnswerPublication` does this around every model
request and tool call of a pydantic-ai agent.)

X11: once the run is over — stopped by its user (:class:`~imprint.runtime.stopping.RunScope`
closes them) or ended by the runtime — :meth:`Heartbeats.close` ends them for good: a
heartbeat after the run's end would be refused and recorded by the Journal, never renew anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Literal

from imprint.runtime.writer import RunWriter

log = logging.getLogger(__name__)

DEFAULT_EVERY = 30.0
InFlight = Literal["model", "tool"]


class Heartbeats:
    def __init__(self, writer: RunWriter, every: float = DEFAULT_EVERY) -> None:
        if every <= 0:
            raise ValueError("heartbeats need a positive interval")
        self.writer = writer
        self.every = every
        self._in_flight: list[InFlight] = []
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    async def close(self) -> None:
        """No heartbeat from now on, not even for a call still in flight; returns once a
        heartbeat being sent has been abandoned. Idempotent."""
        self.closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @contextlib.asynccontextmanager
    async def during(self, in_flight: InFlight) -> AsyncIterator[None]:
        """Heartbeat while the body runs (a model request, a tool call)."""
        self._in_flight.append(in_flight)
        if self._task is None and not self.closed:
            self._task = asyncio.create_task(self._beat(), name=f"imprint-heartbeat-{self.writer.run_id}")
        try:
            yield
        finally:
            self._in_flight.remove(in_flight)
            if not self._in_flight and self._task is not None:
                self._task.cancel()
                self._task = None

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            idle = self.writer.idle_for()
            wait = self.every - (idle if idle is not None else loop.time() - started)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self.writer.heartbeat(self._in_flight[-1] if self._in_flight else None)
            except Exception:  # noqa: BLE001 — the call it accompanies goes on; the next beat retries
                log.warning("run.heartbeat of %s could not be sent; retrying in %ss", self.writer.run_id, self.every,
                            exc_info=True)
                await asyncio.sleep(self.every)

"""X11 — Stop: a user's cancel request reaches the code running the run, which ends it
``stopped`` (pure asyncio: fed by an adapter, no I/O of its own).

Delivery answers ``POST /v1/runs/{run}/cancel`` by putting ``run.cancel_requested`` on
``imprint.control.v1``; the Journal records it on the execution; the runtime SDK delivers it:

* :class:`StopRequests` — which runs were asked to stop, fed with the control topic's
  messages by an adapter (:class:`~imprint.runtime.kafka.KafkaControl`). It remembers the
  most recent requests, so a request that arrives before its run's scope is entered still
  stops it.
* :class:`RunScope` — the cancellation scope of one run. While the task running the run is
  inside :meth:`RunScope.guard`, a stop request for the run cancels that task, and the guard
  raises :class:`Stopped` in place of the cancellation (a cancellation of the task by anyone
  else stays a cancellation). :meth:`RunScope.close` ends the run: the heartbeats it was
  given stop (:meth:`~imprint.runtime.heartbeat.Heartbeats.close`), then ``run.stopped`` goes
  out on the runtime topic, once, naming the request it answers (``cancel_request_id``: the
  request and the stop travel on different topics, and the Journal may read the stop first).
* :func:`run_scope` — both around a block: the API a runtime uses.

X12: an interruption by a newer question of the conversation reaches the runtime as the same
``run.cancel_requested`` (naming that question in ``interrupted_by``), so it stops the run here
unchanged. A *steered* question (``run.steered``, on the same control topic) is kept for its
run too: :meth:`RunScope.take_steered` hands the agent what arrived since it last asked
(:class:`~imprint.runtime.pydantic_ai.AnswerPublication` adds each to the next model request).

::

    async with KafkaControl(bootstrap) as control:          # one per process, like KafkaDecisions
        ...
        async with run_scope(run, control) as scope:
            await agent.run(prompt, capabilities=[AnswerPublication(run, decisions, scope=scope)])
        if scope.stopped:
            ...                                              # run.stopped was sent

The scope cancels the task that entered it, so whatever that task awaits — a model request, a
tool call, pydantic-ai's own tasks under it — is cancelled. What the run sent before
``run.stopped`` stays what it was: Publication settles every proposal that precedes
``run.stopped`` on the run's partition (a send cut short by the cancellation either reached the
broker before ``run.stopped`` or not at all) and refuses any that follows it (``run_stopped``),
so the stop boundary is one position in the run's partition. A body that ends on its own
before the stop reaches it leaves the run as it left it (a run that completed stays completed).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.conversation import RunSteered
from imprint.runtime.heartbeat import Heartbeats
from imprint.runtime.writer import RunWriter

REMEMBERED = 10_000
"""How many of the most recent stop requests :class:`StopRequests` keeps: a run's scope is
entered right after the run starts, long before ten thousand other runs were stopped."""


class Stopped(Exception):
    """The run's user asked it to stop; raised by :meth:`RunScope.guard` in place of the
    cancellation it caused. :func:`run_scope` takes it as the run's end."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was asked to stop")
        self.run_id = run_id


class StopRequests:
    """The stop requests an adapter has seen (:meth:`observe`), and who waits for them."""

    def __init__(self, remember: int = REMEMBERED) -> None:
        self._remember = remember
        self._requested: OrderedDict[str, uuid.UUID | None] = OrderedDict()
        """run_id → the ``event_id`` of its first stop request."""
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        self._steered: OrderedDict[str, list[RunSteered]] = OrderedDict()
        """run_id → the questions handed to it (X12), in arrival order, each once."""

    def observe(self, message: Any) -> None:
        """A message of ``imprint.control.v1``: a cancel request stops its run, a steered question
        is kept for its run (X12); others change nothing."""
        if isinstance(message, RunCancelRequested):
            self.request(message.run_id, message.event_id)
        elif isinstance(message, RunSteered):
            steered = self._steered.setdefault(message.run_id, [])
            if all(s.steered_run_id != message.steered_run_id for s in steered):
                steered.append(message)
            self._steered.move_to_end(message.run_id)
            while len(self._steered) > self._remember:
                self._steered.popitem(last=False)

    def steered(self, run_id: str) -> list[RunSteered]:
        """X12: the questions handed to ``run_id`` so far, in arrival order."""
        return list(self._steered.get(run_id, ()))

    def request(self, run_id: str, event_id: uuid.UUID | None = None) -> None:
        self._requested[run_id] = self._requested.get(run_id) or event_id
        self._requested.move_to_end(run_id)
        while len(self._requested) > self._remember:
            self._requested.popitem(last=False)
        for stop in list(self._watchers.get(run_id, ())):
            stop()

    def requested(self, run_id: str) -> bool:
        return run_id in self._requested

    def request_id(self, run_id: str) -> uuid.UUID | None:
        """The ``event_id`` of the first stop request for ``run_id`` (``None``: none known)."""
        return self._requested.get(run_id)

    def watch(self, run_id: str, stop: Callable[[], None]) -> Callable[[], None]:
        """Call ``stop`` when a request for ``run_id`` arrives (at once if one did); returns
        the function that ends the watch."""
        self._watchers.setdefault(run_id, []).append(stop)

        def unwatch() -> None:
            watchers = self._watchers.get(run_id, [])
            if stop in watchers:
                watchers.remove(stop)
            if not watchers:
                self._watchers.pop(run_id, None)

        if self.requested(run_id):
            stop()
        return unwatch


class RunScope:
    """The cancellation scope of one run (see the module docstring)."""

    def __init__(self, writer: RunWriter, stops: StopRequests) -> None:
        self.writer = writer
        self.stops = stops
        self.stopped = False
        """``run.stopped`` was sent for this run by :meth:`close`."""
        self._heartbeats: list[Heartbeats] = []
        self._taken = 0

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    @property
    def requested(self) -> bool:
        """A stop request for this run has arrived."""
        return self.stops.requested(self.run_id)

    def take_steered(self) -> list[RunSteered]:
        """X12: the questions handed to this run since the last call (each is taken once)."""
        steered = self.stops.steered(self.run_id)
        fresh, self._taken = steered[self._taken:], len(steered)
        return fresh

    def adopt(self, heartbeats: Heartbeats) -> None:
        """These heartbeats end when the run is stopped (a heartbeat after ``run.stopped``
        would be refused by the Journal)."""
        self._heartbeats.append(heartbeats)

    def check(self) -> None:
        """Raise :class:`Stopped` if a stop for this run was requested: for code about to start
        new work (a model request, a tool call) that a cancellation may not have reached."""
        if self.requested:
            raise Stopped(self.run_id)

    @contextlib.asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """While the current task is inside, a stop request for this run cancels it; the
        guard then raises :class:`Stopped` instead of the cancellation. A request that came
        before cancels the task at its first wait inside."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a run scope guards an asyncio task")
        loop = asyncio.get_running_loop()
        ours = False
        inside = True

        def stop() -> None:
            nonlocal ours
            if inside and not ours:
                ours = True
                task.cancel(f"stop requested for run {self.run_id}")

        # Through the loop, never from inside the task itself: the cancellation then always
        # lands at an await of the block, never on a later await after the guard.
        unwatch = self.stops.watch(self.run_id, lambda: loop.call_soon(stop))
        try:
            yield
        except asyncio.CancelledError:
            if ours and task.uncancel() == 0:
                raise Stopped(self.run_id) from None
            raise  # (also) cancelled by someone else: that cancellation goes on
        except Stopped:
            if ours:
                task.uncancel()
            raise
        except Exception:
            if ours and task.uncancel() == 0:
                raise Stopped(self.run_id) from None  # the body turned the cancellation into an error
            raise
        finally:
            inside = False
            unwatch()
        if ours:  # the body swallowed the cancellation and went on: it is still stopped
            task.uncancel()
            raise Stopped(self.run_id)

    async def close(self) -> None:
        """End the run ``stopped``: its heartbeats first, then ``run.stopped`` naming the
        request it answers. Once."""
        for heartbeats in self._heartbeats:
            await heartbeats.close()
        if not self.stopped:
            await self.writer.stop(cancel_request_id=self.stops.request_id(self.run_id))
            self.stopped = True


@contextlib.asynccontextmanager
async def run_scope(writer: RunWriter, stops: StopRequests) -> AsyncIterator[RunScope]:
    """Run the block as ``writer``'s run, stoppable by its user: a stop request cancels the
    block and ends the run ``stopped`` (:meth:`RunScope.close`); the block's code after the
    scope sees ``scope.stopped``. Any other end of the block passes through unchanged."""
    scope = RunScope(writer, stops)
    try:
        async with scope.guard():
            yield scope
    except Stopped as stopped:
        if stopped.run_id != writer.run_id:
            raise  # another run's scope, nested in this one
        await scope.close()

"""X11 — the runtime SDK's run scope over an in-memory transport: a stop request for its run
cancels the work inside and ends the run ``stopped``; nothing else does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from imprint.contracts.control import ConversationDeleteRequested, RunCancelRequested, RunLeaseLapsed
from imprint.contracts.registry import decode
from imprint.contracts.topics import Topic
from imprint.runtime import Heartbeats, MemoryTransport, RunScope, RunWriter, Stopped, StopRequests, run_scope

STEP = 0.02


def sent(transport: MemoryTransport) -> list[str]:
    return [decode(Topic.RUNTIME, record.value).type for record in transport.records]


def cancel(run_id: str) -> RunCancelRequested:
    return RunCancelRequested(run_id=run_id, account_id="acct-1")


async def started(transport: MemoryTransport, run_id: str = "run-1") -> RunWriter:
    writer = RunWriter(transport, run_id)
    await writer.start()
    return writer


async def producing(log: list[str]) -> None:
    """A model that is still producing: it never ends by itself."""
    try:
        while True:
            await asyncio.sleep(STEP)
            log.append("line")
    except asyncio.CancelledError:
        log.append("cancelled")
        raise


def request_later(stops: StopRequests, message: Any, delay: float = STEP * 3,
                  after: Callable[[], bool] = lambda: True) -> asyncio.Task[None]:
    """``message`` arrives ``delay`` seconds from now, and not before ``after()`` holds (checked
    every ``STEP / 5``, for at most 30 s): what the test needs to have happened first."""
    async def later() -> None:
        await asyncio.sleep(delay)
        deadline = asyncio.get_running_loop().time() + 30
        while not after() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(STEP / 5)
        stops.observe(message)

    return asyncio.create_task(later())


@pytest.mark.rule("X11")
async def test_a_stop_request_cancels_the_work_in_the_scope_and_ends_the_run_stopped() -> None:
    transport, stops, log = MemoryTransport(), StopRequests(), []
    writer = await started(transport)
    request = cancel("run-1")
    request_later(stops, request)
    async with run_scope(writer, stops) as scope:
        await writer.text("Before the stop.", turn_id="turn-1")
        await producing(log)
    assert scope.stopped and log[-1] == "cancelled"
    assert sent(transport) == ["run.started", "answer.text", "run.stopped"], "run.stopped is the run's last word"
    stopped = decode(Topic.RUNTIME, transport.records[-1].value)
    assert stopped.cancel_request_id == request.event_id, "the stop names the request it answers"
    assert asyncio.current_task().cancelling() == 0, "the scope's own cancellation does not leak to its task"


@pytest.mark.rule("X11")
async def test_a_request_that_came_before_the_scope_stops_the_run_at_its_first_wait() -> None:
    transport, stops, log = MemoryTransport(), StopRequests(), []
    writer = await started(transport)
    stops.observe(cancel("run-1"))
    async with run_scope(writer, stops) as scope:
        await producing(log)
    assert scope.stopped and log == ["cancelled"]
    assert sent(transport) == ["run.started", "run.stopped"]


@pytest.mark.rule("X11")
async def test_nothing_but_a_request_for_its_own_run_stops_it() -> None:
    transport, stops = MemoryTransport(), StopRequests()
    writer = await started(transport)
    for other in (cancel("run-2"), ConversationDeleteRequested(conversation_id="conv-1", account_id="acct-1"),
                  RunLeaseLapsed(run_id="run-1", account_id="acct-1", conversation_id="conv-1")):
        request_later(stops, other, delay=STEP)
    async with run_scope(writer, stops) as scope:
        await asyncio.sleep(STEP * 5)
        await writer.complete("answered", answer_text="Done.")
    assert not scope.stopped and not stops.requested("run-1")
    assert sent(transport) == ["run.started", "run.completed"]


@pytest.mark.rule("X11")
async def test_a_run_that_ended_before_the_request_stays_as_it_ended() -> None:
    transport, stops = MemoryTransport(), StopRequests()
    writer = await started(transport)
    async with run_scope(writer, stops) as scope:
        await writer.complete("answered", answer_text="Done.")
    stops.observe(cancel("run-1"))
    await asyncio.sleep(STEP)
    assert not scope.stopped and sent(transport) == ["run.started", "run.completed"]


@pytest.mark.rule("X11")
async def test_a_cancellation_by_anyone_else_stays_a_cancellation_and_stops_nothing() -> None:
    transport, stops, log = MemoryTransport(), StopRequests(), []
    writer = await started(transport)
    scopes: list[RunScope] = []

    async def run() -> None:
        async with run_scope(writer, stops) as scope:
            scopes.append(scope)
            await producing(log)

    task = asyncio.create_task(run())
    await asyncio.sleep(STEP * 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not scopes[0].stopped and sent(transport) == ["run.started"], "a shutdown is not the user's stop"


@pytest.mark.rule("X11")
@pytest.mark.rule("X10")
async def test_the_runs_heartbeats_end_with_its_stop() -> None:
    transport, stops, log = MemoryTransport(), StopRequests(), []
    writer = await started(transport)
    request_later(stops, cancel("run-1"), delay=STEP * 8, after=lambda: "run.heartbeat" in sent(transport))
    async with run_scope(writer, stops) as scope:
        beats = Heartbeats(writer, every=STEP)
        scope.adopt(beats)
        async with beats.during("model"):
            await producing(log)
    assert "run.heartbeat" in sent(transport), "the model was silent: heartbeats went out"
    await asyncio.sleep(STEP * 5)
    assert sent(transport)[-1] == "run.stopped", "no heartbeat after the stop"
    assert beats.closed
    async with beats.during("tool"):  # a call that somehow still starts beats no more
        await asyncio.sleep(STEP * 3)
    assert sent(transport)[-1] == "run.stopped"


@pytest.mark.rule("X11")
async def test_work_that_swallows_the_cancellation_is_still_stopped() -> None:
    transport, stops = MemoryTransport(), StopRequests()
    writer = await started(transport)
    request_later(stops, cancel("run-1"))
    after: list[str] = []
    async with run_scope(writer, stops) as scope:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass  # careless code under the runtime
        after.append("went on")
        scope.check()  # what the pydantic-ai capability does before each model request and tool call
        after.append("never")
    assert scope.stopped and after == ["went on"]
    assert sent(transport) == ["run.started", "run.stopped"]


@pytest.mark.rule("X11")
async def test_a_guard_alone_raises_stopped_in_place_of_the_cancellation() -> None:
    transport, stops = MemoryTransport(), StopRequests()
    scope = RunScope(await started(transport), stops)
    request_later(stops, cancel("run-1"))
    with pytest.raises(Stopped) as raised:
        async with scope.guard():
            await asyncio.sleep(10)
    assert raised.value.run_id == "run-1" and not scope.stopped, "only close() sends run.stopped"
    await scope.close()
    await scope.close()
    assert sent(transport) == ["run.started", "run.stopped"], "once"


@pytest.mark.rule("X11")
def test_stop_requests_are_remembered_within_a_bound() -> None:
    stops = StopRequests(remember=2)
    for run_id in ("a", "b", "c"):
        stops.observe(cancel(run_id))
    assert [stops.requested(r) for r in ("a", "b", "c")] == [False, True, True]
    called: list[str] = []
    unwatch = stops.watch("c", lambda: called.append("c"))
    assert called == ["c"], "a run asked to stop before it was watched is stopped when it is"
    unwatch()
    stops.observe(cancel("c"))
    assert called == ["c"]


@pytest.mark.rule("X11")
async def test_the_cancellation_never_outlives_the_scope() -> None:
    transport, stops = MemoryTransport(), StopRequests()
    writer = await started(transport)
    stops.observe(cancel("run-1"))
    async with run_scope(writer, stops) as scope:
        pass  # a block that never waits: the stop cannot reach it
    await asyncio.sleep(0)  # no cancellation left pending on this task
    assert not scope.stopped and asyncio.current_task().cancelling() == 0

    writer = await started(transport, "run-2")
    async with run_scope(writer, stops) as scope:
        stops.observe(cancel("run-2"))  # heard while the block runs, before its next wait
        await asyncio.sleep(10)
    await asyncio.sleep(0)
    assert scope.stopped and asyncio.current_task().cancelling() == 0

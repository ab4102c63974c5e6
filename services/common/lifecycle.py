"""Running a part until it is told to stop (SIGTERM/SIGINT), with its broker started first."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from services.common.observability import get_logger

if TYPE_CHECKING:
    from faststream.kafka import KafkaBroker

    from services.common.relay import Relay

log = get_logger(__name__)

GC_THRESHOLD = (10_000, 50, 10)
"""The cyclic collector's thresholds once a process is running. A poll allocates thousands of
short-lived, acyclic objects (decoded messages, models, rows) that reference counting frees;
with the default young generation (700 allocations) the collector ran after every few
messages and, in its older generations, walked every object the process had built to run.

The middle generation is collected after 50 young collections, not the default 10: a full
poll (hundreds of records, under a backlog) keeps its decoded messages, events and rows
alive for its whole unit of work, across several young collections. Collected every 10,
the middle generation caught a poll's objects still alive and moved them to the oldest
generation, where they died a moment later but still counted as new long-lived objects:
once those pending ones reach a quarter of the oldest generation, the collector walks all
of it — every hot aggregate the part keeps (up to ``IMPRINT_HOT_STATE_BYTES``). So a part
under a backlog walked its whole hot state for objects of polls long gone, more often the
larger its polls. Waiting 50 young collections lets a poll end first; what the middle
generation then holds is what outlived its poll (hot state and the odd cycle), which is
what it is for."""


def settle_heap() -> None:
    """What a process has built to run (modules, its application, clients and their
    schemas) lives as long as the process: collect once, move it out of the cyclic
    collector's reach (``gc.freeze``), and collect young objects every
    :data:`GC_THRESHOLD` allocations instead of every 700."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


async def run_until_stopped(part: str, broker: KafkaBroker | None, *work: Coroutine[Any, Any, Any]) -> None:
    """Start ``broker`` (its subscribers begin consuming; ``None`` for a part that only
    produces with its own client), run ``work`` beside it, and stop everything on a
    signal or when any piece of work ends with an error."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    if broker is not None:
        await broker.start()
    settle_heap()
    log.info("part running", part=part)
    tasks = [asyncio.create_task(w) for w in work]
    waiter = asyncio.create_task(stopping.wait())
    try:
        done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in [waiter, *tasks]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if broker is not None:
            await broker.stop()
        log.info("part stopped", part=part)


class _Log(Protocol):
    def close(self) -> None: ...


async def run_relay_until_stopped(part: str, relay: Relay, log_read: _Log) -> None:
    """A relay run on its own (``imprint serve <part>``): until it is told to stop, then
    stop it and close the log it reads."""
    try:
        await run_until_stopped(part, None, relay.run())
    finally:
        relay.stop()
        log_read.close()

"""Running a part until it is told to stop (SIGTERM/SIGINT), with its broker started first."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any

from faststream.kafka import KafkaBroker

from services.common.observability import get_logger

log = get_logger(__name__)


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

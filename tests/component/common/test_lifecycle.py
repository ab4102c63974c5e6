"""A running part (``run_until_stopped``): its work runs until it ends or fails, and once it
runs, what it built to run is out of the cyclic collector's reach."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from services.common.lifecycle import GC_THRESHOLD, run_until_stopped


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_a_running_part_has_its_startup_heap_frozen_and_a_larger_young_generation(collector: None) -> None:
    gc.unfreeze()
    built_to_run = [object() for _ in range(100)]  # what a part holds from startup on
    seen: dict[str, object] = {}

    async def work() -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["threshold"] = gc.get_threshold()

    asyncio.run(run_until_stopped("test", None, work()))
    assert isinstance(seen["frozen"], int) and seen["frozen"] >= len(built_to_run)
    assert seen["threshold"] == GC_THRESHOLD


def test_work_that_fails_stops_the_part_with_its_error(collector: None) -> None:
    async def work() -> None:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        asyncio.run(run_until_stopped("test", None, work()))

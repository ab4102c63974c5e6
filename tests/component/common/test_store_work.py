"""Where a poll's store work runs (``store_work``): a small poll on the event loop's own
thread, a large one in a worker thread, so a paced load's one-proposal polls pay no
trip to a thread and back while a burst's large polls still overlap the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from services.common.settings import Settings
from services.common.subscription import store_work


def _thread_of(batch: list[int]) -> tuple[int, int]:
    return threading.get_ident(), len(batch)


@pytest.mark.parametrize("size", [0, 1, 16])
def test_a_poll_up_to_the_limit_runs_on_the_loop(size: int) -> None:
    async def main() -> tuple[int, tuple[int, int]]:
        return threading.get_ident(), await store_work(size, 16, _thread_of, list(range(size)))

    loop_thread, (work_thread, seen) = asyncio.run(main())
    assert work_thread == loop_thread
    assert seen == size


def test_a_larger_poll_runs_in_a_worker_thread() -> None:
    async def main() -> tuple[int, tuple[int, int]]:
        return threading.get_ident(), await store_work(17, 16, _thread_of, list(range(17)))

    loop_thread, (work_thread, seen) = asyncio.run(main())
    assert work_thread != loop_thread
    assert seen == 17


def test_zero_sends_every_poll_to_a_thread() -> None:
    async def main() -> tuple[int, tuple[int, int]]:
        return threading.get_ident(), await store_work(1, 0, _thread_of, [1])

    loop_thread, (work_thread, _) = asyncio.run(main())
    assert work_thread != loop_thread


def test_the_work_fails_where_it_is_awaited() -> None:
    def refuse(batch: list[int]) -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        asyncio.run(store_work(1, 16, refuse, [1]))


def test_the_default_limit_is_a_small_poll() -> None:
    assert Settings().inline_poll_records == 16

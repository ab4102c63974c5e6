"""D4/D5: a stream's delivery outcome is in the store before its recorder returns, and
``completed`` is sticky. The outcomes of streams that end while a write is under way are
written together (``GroupedOutcomes``): a thousand clients of one run leaving at once are
not a thousand transactions."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from services.delivery.observer import GroupedOutcomes


class Store:
    """Writes that take a moment, as a transaction does; what each write carried."""

    def __init__(self, fail: bool = False) -> None:
        self.writes: list[dict[str, str]] = []
        self.state: dict[str, str] = {}
        self.fail = fail

    async def write(self, outcomes: Mapping[str, str]) -> None:
        await asyncio.sleep(0.01)
        if self.fail:
            raise RuntimeError("the store is down")
        self.writes.append(dict(outcomes))
        for run_id, outcome in outcomes.items():
            if self.state.get(run_id) != "completed":
                self.state[run_id] = outcome


@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
def test_outcomes_that_arrive_during_a_write_go_together_and_each_caller_waits_for_its_own() -> None:
    store = Store()

    async def scenario() -> list[bool]:
        record = GroupedOutcomes(store.write)
        written: list[bool] = []

        async def stream_ends(run_id: str, outcome: str) -> None:
            await record(run_id, outcome)
            written.append(run_id in store.state)  # its outcome is stored when it returns

        await asyncio.gather(*(stream_ends("run-a", "interrupted") for _ in range(500)),
                             stream_ends("run-a", "completed"),
                             *(stream_ends(f"run-{i}", "interrupted") for i in range(50)))
        await stream_ends("run-late", "interrupted")  # alone: written at once, on its own
        return written

    written = asyncio.run(scenario())
    assert len(written) == 552 and all(written)
    assert store.state["run-a"] == "completed", "completed wins over the interruptions beside it"
    assert len(store.writes) <= 3, "the outcomes of a burst share their writes"
    assert store.writes[-1] == {"run-late": "interrupted"}


@pytest.mark.rule("D4")
def test_every_caller_of_a_failed_write_hears_its_error() -> None:
    store = Store(fail=True)

    async def scenario() -> list[BaseException | None]:
        record = GroupedOutcomes(store.write)
        return await asyncio.gather(*(record(f"run-{i}", "completed") for i in range(10)), return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(result, RuntimeError) for result in results)

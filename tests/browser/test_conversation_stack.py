"""D9 and X12 in Chromium over the whole stack as processes (Publication and its relay, the
Journal, Delivery; real Kafka; the store on SQLite and on PostgreSQL) with the runtime SDK as a
runtime uses it (``RunWriter.start(turns=…)``, ``run_scope``): two tabs of the reference page on
one conversation. A second question under ``enqueue`` appears queued in both tabs — how soon is
printed as ``QUEUE SHOWN <seconds>`` — and starts when the first answer ends, both tabs moving
on; a third question cancelled in one tab disappears from the other (the runtime's ``start()``
raises ``RunCancelled``); a refresh shows the same queue; under ``interrupt`` the live answer
is stopped through X11 (reason ``interrupted``) and the newer question follows in both tabs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from imprint.runtime import RunWriter, run_scope
from imprint.runtime.kafka import KafkaControl, KafkaTransport, KafkaTurns
from imprint.runtime.turns import RunCancelled
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.browser.test_conversation_queue import STATE, until
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(240)]

ACCOUNT, CONV = "acct-tabs", "conv-tabs-stack"
WAIT = 60.0
T = TypeVar("T")


class Runtime:
    """The runtime SDK on an event loop of its own thread (Playwright's sync API keeps one on
    the test's thread)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="runtime", daemon=True)
        self.thread.start()
        self.call(self._open())

    async def _open(self) -> None:
        s = self.settings
        self.kafka = await KafkaTransport(s.kafka_bootstrap, topic_prefix=s.topic_prefix).__aenter__()
        self.turns = await KafkaTurns(s.kafka_bootstrap, topic_prefix=s.topic_prefix).__aenter__()
        self.control = await KafkaControl(s.kafka_bootstrap, topic_prefix=s.topic_prefix).__aenter__()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(WAIT)

    def later(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def ask(self, run_id: str, question: str, policy: str | None = None) -> RunWriter:
        writer = RunWriter(self.kafka, run_id)
        await writer.admit(account_id=ACCOUNT, conversation_id=CONV, message_id=f"msg-{run_id}", question=question,
                           policy=policy)  # type: ignore[arg-type]
        return writer

    async def started(self, writer: RunWriter) -> RunWriter:
        await writer.start(turns=self.turns, timeout=WAIT)
        return writer

    async def answering(self, writer: RunWriter) -> bool:
        """The run's agent, producing until a stop ends it (X11); whether it was stopped."""
        async with run_scope(writer, self.control) as scope:
            await asyncio.Event().wait()
        return scope.stopped

    def close(self) -> None:
        async def shut() -> None:
            for part in (self.control, self.turns, self.kafka):
                await part.__aexit__(None, None, None)
        try:
            self.call(shut())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.mark.rule("D9")
@pytest.mark.rule("X12")
@pytest.mark.rule("X11")
def test_two_tabs_follow_one_conversation_over_the_whole_stack(isolated: Settings, chromium: Any) -> None:
    token = mint_token(isolated, ACCOUNT)
    with Stack(isolated) as stack:
        runtime = Runtime(isolated)
        try:
            first = runtime.call(runtime.started(runtime.call(runtime.ask("run-s1", "How deep is the Baltic?"))))
            stack.wait_for_run("run-s1", token)
            second_tab = chromium.context.new_page()
            tabs = [chromium, second_tab]
            for tab in tabs:
                tab.goto(f"{stack.base_url}/#conversation={CONV}&token={token}")
                until(tab, "s.run === 'run-s1'")

            asked = time.monotonic()
            second = runtime.call(runtime.ask("run-s2", "And the North Sea?"))  # enqueue: the default
            waiting = runtime.later(runtime.started(second))
            for tab in tabs:
                until(tab, "s.queue.join() === 'run-s2' && s.run === 'run-s1'")
            print(f"QUEUE SHOWN {time.monotonic() - asked:.3f}")
            assert not waiting.done(), "the runtime's start() waits for its turn"

            runtime.call(first.complete("answered", answer_text="About 55 metres on average."))
            waiting.result(WAIT)
            for tab in tabs:
                state = until(tab, "s.run === 'run-s2' && s.queue.length === 0")
                assert state["earlier"][0][0] == "run-s1"

            # A third question waits; the first tab cancels it; the second tab sees it leave.
            third = runtime.call(runtime.ask("run-s3", "And the Black Sea?"))
            cancelled = runtime.later(runtime.started(third))
            for tab in tabs:
                until(tab, "s.queue.join() === 'run-s3'")
            tabs[0].click("#queue li[data-run-id='run-s3'] button.cancel-queued")
            state = until(tabs[1], "s.queue.length === 0 && s.questions.some(q => q[0] === 'run-s3' && q[1] === 'ended')")
            with pytest.raises(RunCancelled):
                cancelled.result(WAIT)
            tabs[1].reload()
            refreshed = until(tabs[1], "s.run === 'run-s2' && s.questions.length === 3")
            assert refreshed["queue"] == state["queue"] == [] and refreshed["questions"] == state["questions"]

            # Under interrupt the live answer is stopped (X11) and the newer question follows.
            stopped = runtime.later(runtime.answering(second))
            fourth = runtime.call(runtime.ask("run-s4", "Stop — what about the Caspian?", policy="interrupt"))
            runtime.call(runtime.started(fourth))
            assert stopped.result(WAIT), "the interrupted run's agent was stopped"
            for tab in tabs:
                state = until(tab, "s.run === 'run-s4'")
                assert [q for q in state["questions"] if q[0] == "run-s2"] == [["run-s2", "ended"]]
                assert "interrupted" in tab.inner_text("#questions li[data-run-id='run-s2']")
            runtime.call(fourth.complete("answered", answer_text="It is a lake."))
            assert tab.evaluate(STATE)["queue"] == []
        finally:
            runtime.close()

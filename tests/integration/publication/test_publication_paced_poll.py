"""Where a poll of Publication runs and when its previews leave, on each backend.

A small poll (at most ``IMPRINT_INLINE_POLL_RECORDS``) runs on the consumer's event loop,
paused once its previews are emitted and before its commit (``PublicationLog.steps``):
the loop sends them and waits for the broker's answer, then the unit commits — the previews
are on the wire before the commit starts (P14), and a modification's quota is durable by then (P13).
A larger poll runs in a worker thread. The consumer's Kafka side is replaced by what it
hands work to (the handler the subscription would call, an outbox that records), so the
order of sends, writes and commits is seen exactly."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import closing
from typing import Any

import pytest

from imprint.publication import PublicationRun
from services.common.event_log import stored
from services.common.inbound import Inbound
from services.common.kafka import Outgoing
from services.common.settings import Settings
from services.publication import consumer
from services.publication.application import PublicationLog, open_log
from tests.integration.publication.pubsupport import admitted, part
from tests.support.backends import Backend
from tests.support.feeder import Feeder

pytestmark = pytest.mark.integration
RUN = "r-paced"


class RecordingOutbox:
    """Takes the consumer's sends and answers each on a later turn of the loop, as a broker
    would, noting when."""

    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    async def send_many(self, items: Sequence[Outgoing]) -> list[asyncio.Future[Any]]:
        self.seen.append(("sent", [item[1].type for item in items]))
        loop = asyncio.get_running_loop()
        acknowledged: asyncio.Future[Any] = loop.create_future()

        def answer() -> None:
            self.seen.append(("acknowledged",))
            acknowledged.set_result(None)

        loop.call_soon(answer)
        return [acknowledged]


@pytest.fixture
def app(backend: Backend) -> Iterator[PublicationLog]:
    with closing(open_log(backend.settings)) as log:
        yield log


def position(app: PublicationLog, batch: Sequence[Inbound]) -> int:
    return app.position(batch[-1].tracking.application_name)


def handling(app: PublicationLog, settings: Settings, seen: list[Any]) -> Callable[[list[Inbound]], Awaitable[None]]:
    """The consumer's poll handler, subscribed on the running loop as the tracked subscription
    would call it; every commit of ``app`` noted in ``seen`` with the thread it ran on."""
    subscribed: dict[str, Any] = {}

    def subscribe_tracked(broker: object, settings: Settings, outbox: object, **kwargs: Any) -> None:
        subscribed.update(kwargs)

    committed = app.committed

    def noting(recordings: list[Any]) -> None:
        seen.append(("committed", threading.get_ident()))
        committed(recordings)

    app.committed = noting  # type: ignore[method-assign]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(consumer, "subscribe_tracked", subscribe_tracked)
        consumer.subscribe(None, settings, RecordingOutbox(seen), app)  # type: ignore[arg-type]
    return subscribed["handle"]  # type: ignore[no-any-return]


def polled(app: PublicationLog, settings: Settings, batch: list[Inbound], seen: list[Any]) -> int:
    """One poll through the consumer's handler; the event loop's thread."""

    async def poll() -> int:
        await handling(app, settings, seen)(batch)
        return threading.get_ident()

    return asyncio.run(poll())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.rule("P13")
@pytest.mark.rule("P14")
def test_a_poll_pauses_after_its_modifications_preview_with_its_quota_durable_and_before_its_commit(
        backend: Backend, app: PublicationLog) -> None:
    feed = Feeder(lambda batch: app.process(batch, lambda _: None))
    feed.send(admitted(RUN), part(RUN, "w-1", "Original body."))
    (block,) = stored(app, PublicationRun.id_for(RUN)).live_blocks()
    emitted: list[Sequence[Outgoing]] = []
    batch = feed.wrap(part(RUN, "w-2", "Revised body.", replaces=block.block_id))
    before = position(app, batch)

    steps = app.steps(batch, emitted.append)
    next(steps)  # paused: the preview is emitted, the commit is next
    assert [[item[1].type for item in items] for items in emitted] == [["answer.preview"]]
    assert position(app, batch) == before, "the poll is not committed yet"
    with closing(open_log(backend.settings)) as other:  # what the log holds at the pause
        logged = other.run(RUN)
        assert logged is not None and logged.consumed == {"tool:w-2#0": block.block_id}, "quota durable first (P13)"
        assert logged.settled("tool:w-2") is None
    with pytest.raises(StopIteration):
        next(steps)
    assert position(app, batch) == batch[-1].offset, "committed with its position once resumed"
    assert [b.kind for b in stored(app, PublicationRun.id_for(RUN)).settled("tool:w-2").blocks] == ["committed"]  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.rule("P14")
def test_a_small_poll_runs_on_the_loop_its_preview_answered_before_its_commit(
        backend: Backend, app: PublicationLog) -> None:
    seen: list[Any] = []
    feed = Feeder(lambda batch: app.process(batch, lambda _: None))
    feed.send(admitted(RUN))
    batch = feed.wrap(part(RUN, "w-1", "A first block."))

    loop_thread = polled(app, backend.settings, batch, seen)
    assert seen == [("sent", ["answer.preview"]), ("acknowledged",), ("committed", loop_thread)]
    assert position(app, batch) == batch[-1].offset


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.rule("P14")
def test_a_poll_larger_than_the_inline_limit_runs_in_a_worker_thread(backend: Backend, app: PublicationLog) -> None:
    seen: list[Any] = []
    feed = Feeder(lambda batch: app.process(batch, lambda _: None))
    feed.send(admitted(RUN))
    batch = feed.wrap(part(RUN, "w-1", "A first block."), part(RUN, "w-2", "A second block."))

    loop_thread = polled(app, backend.settings.model_copy(update={"inline_poll_records": 1}), batch, seen)
    [(_, commit_thread)] = [step for step in seen if step[0] == "committed"]
    assert commit_thread != loop_thread
    assert ("sent", ["answer.preview", "answer.preview"]) in seen
    assert position(app, batch) == batch[-1].offset


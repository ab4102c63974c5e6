"""A relay decodes only what its log announces (``Relay(topics=...)``): the stored topics
come from the same table that maps events to messages, so the events it leaves undecoded
are exactly those that announce nothing, and what it sends is what a relay decoding every
event sends, in the same order. A batch that announces nothing moves the position
without a tracking commit, and is recorded only every ``UNRECORDED_SPAN`` positions (a
restart re-reads at most that, and sends none of it)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.utils import _topic_cache, get_topic, resolve_topic

from imprint.contracts.runtime import AnswerPart, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from imprint.journal import announcements as journal_announcements
from imprint.publication import announcements as publication_announcements
from services.common import relay as relay_module
from services.common.inbound import Inbound
from services.common.relay import Relay
from services.common.settings import Settings
from services.journal.relay import RELAY_NAME as JOURNAL_RELAY, BatchAnnouncer
from services.publication.relay import RELAY_NAME, announce_publication
from services.publication.sealing import BatchOpener
from imprint.shredding import InMemoryKeyring
from tests.support.backends import memory_environment
from services.journal.application import RuntimeJournal
from services.publication.application import open_log
from tests.support import runs

sys.path.insert(0, str(Path(__file__).parents[1] / "journal"))
from journal_helpers import Feeder, completed, delete_requested, granted, published, to_running  # noqa: E402


@pytest.fixture
def journal() -> Any:
    app = RuntimeJournal(memory_environment("journal"), keyring=InMemoryKeyring())
    yield app
    app.close()


@pytest.fixture
def feed(journal: Any) -> Feeder:
    return Feeder(journal)


class Topic_:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def publish_many(self, items: Any) -> None:
        self.messages.extend(message for _, message in items)


def _every_notification(app: Any) -> list[Any]:
    return list(app.recorder.select_notifications(start=1, limit=100_000))


def _sent(batch: list[tuple[int, Any]]) -> list[Any]:
    return [message for _, items in batch for _, message in items]


def _feed_publication(log: Any, run: str, start: int, *, parts: int, end: bool = False) -> int:
    messages: list[Any] = [RunAdmitted(run_id=run, account_id="acct", conversation_id=f"conv-{run}", message_id="m",
                                       question="q", qcs=QuestionConditionSet(qcs_id="qcs"))]
    messages += [AnswerPart(run_id=run, turn_id="t", tool_call_id=f"{run}-k{i}", sealed=True,
                            arguments={"markdown": f"Block {i} of {run}."}) for i in range(parts)]
    messages += [AnswerPart(run_id=run, turn_id="t", tool_call_id=f"{run}-bad", sealed=True, arguments={})]
    if end:
        messages.append(runs.completed(run, "The answer."))
    log.process([Inbound(str(Topic.RUNTIME), 0, start + i, m, size=100) for i, m in enumerate(messages)],
                lambda items: None)
    return start + len(messages)


@pytest.mark.rule("P14")
def test_the_publication_relay_decodes_only_what_announces_and_sends_what_a_full_read_sends(tmp_path: Path) -> None:
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        offset = _feed_publication(log, "run-a", 0, parts=3)
        _feed_publication(log, "run-b", offset, parts=2, end=True)
        every = _every_notification(log)
        opener = BatchOpener(log.mapper, log.keyring)
        announcing = {n.id for n, event in zip(every, opener(every)) if publication_announcements.announce(event)}
        assert {n.id for n in every if n.topic in publication_announcements.ANNOUNCED_TOPICS} == announcing
        assert len(announcing) < len(every), "admissions, grants and quota announce nothing"

        full = Relay(log, announce_publication, Topic_(), name=RELAY_NAME, to_events=opener)._read(0)
        decoded: list[int] = []
        only = Relay(log, announce_publication, Topic_(), name=RELAY_NAME,
                     to_events=lambda batch: [decoded.append(n.id) or e for n, e in zip(batch, opener(batch))],
                     topics=publication_announcements.ANNOUNCED_TOPICS)._read(0)
        assert set(decoded) == announcing, "nothing that announces nothing is decoded"
        assert _sent(only) == _sent(full) and {m.type for m in _sent(only)} >= {
            "answer.published", "answer.rejected", "answer.settled"}
        assert [position for position, _ in only] == [n.id for n in every], "every position is covered"
    finally:
        log.close()


@pytest.mark.rule("P14")
def test_the_journal_relay_decodes_only_what_announces(journal: Any, feed: Any) -> None:
    feed(*to_running("r1"), granted("r1", "src-a"), published("r1", "tool:c1", "blk-1"),
         published("r1", "tool:c2", "blk-2"), completed("r1"), delete_requested())
    every = _every_notification(journal)
    announcer = BatchAnnouncer(journal)
    announcing = {n.id for n, event in zip(every, announcer.to_events(every)) if announcer(event)}
    assert {n.id for n in every if n.topic in journal_announcements.ANNOUNCED_TOPICS} == announcing
    assert len(announcing) < len(every), "effects, grants and most conversation facts announce nothing"

    full = Relay(journal, announcer, Topic_(), name=JOURNAL_RELAY, to_events=announcer.to_events)._read(0)
    only = Relay(journal, announcer, Topic_(), name=JOURNAL_RELAY, to_events=announcer.to_events,
                 topics=journal_announcements.ANNOUNCED_TOPICS)._read(0)
    assert _sent(only) == _sent(full)
    assert {m.type for m in _sent(only)} == {"run.transitioned", "run.closed", "conversation.deleted",
                                             "conversation.question_started", "conversation.question_ended"}


@pytest.mark.rule("P14")
def test_an_announced_event_is_stored_under_one_topic_only() -> None:
    """The filter names each announced class by its topic: an alias (``register_topic``)
    of that class, or of its aggregate or module, would be stored under a name the
    relay does not read."""
    for module in (publication_announcements, journal_announcements):
        classes = [resolve_topic(topic) for topic in module.ANNOUNCED_TOPICS]
        assert [get_topic(c) for c in classes] == list(module.ANNOUNCED_TOPICS)
        holders = [*classes, *(getattr(sys.modules[c.__module__], c.__qualname__.split(".")[0]) for c in classes),
                   *(sys.modules[c.__module__] for c in classes)]
        aliases = [name for name, obj in list(_topic_cache.items())
                   if any(obj is holder for holder in holders) and name != _real_topic(obj)]
        assert aliases == []


def _real_topic(obj: Any) -> str:
    return obj.__name__ if isinstance(obj, type(sys)) else get_topic(obj)


async def _follow(relay: Relay, until: Any, timeout: float = 10.0) -> None:
    task = asyncio.create_task(relay.run())
    deadline = time.monotonic() + timeout
    try:
        while not until():
            assert time.monotonic() < deadline, "the relay did not get there"
            await asyncio.sleep(0.02)
    finally:
        relay.stop()
        await task


@pytest.mark.rule("P14")
def test_a_batch_that_announces_nothing_moves_the_position_without_a_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        def relay(topic: Topic_) -> Relay:
            return Relay(log, announce_publication, topic, name=RELAY_NAME, to_events=BatchOpener(log.mapper, log.keyring),
                         topics=publication_announcements.ANNOUNCED_TOPICS)

        offset = _feed_publication(log, "run-a", 0, parts=2)
        first, sent = relay(Topic_()), Topic_()
        first._outbox = sent
        asyncio.run(_follow(first, lambda: first.position == log.recorder.max_notification_id()))
        announced = first.recorded_position()
        assert len(sent.messages) == 3 and 0 < announced <= first.position

        # An admission announces nothing: the position runs ahead of the record.
        quiet = RunAdmitted(run_id="run-b", account_id="acct", conversation_id="conv-b", message_id="m",
                            question="q", qcs=QuestionConditionSet(qcs_id="qcs"))
        log.process([Inbound(str(Topic.RUNTIME), 0, offset, quiet, size=100)], lambda items: None)
        head = log.recorder.max_notification_id()
        second, sent = relay(Topic_()), Topic_()
        second._outbox = sent
        asyncio.run(_follow(second, lambda: second.position == head))
        assert second.recorded_position() == announced and sent.messages == []

        # Past the span it is recorded: a restart would re-read no more than that.
        monkeypatch.setattr(relay_module, "UNRECORDED_SPAN", 1)
        third = relay(Topic_())
        asyncio.run(_follow(third, lambda: third.recorded_position() == head))
        assert third.position == head
    finally:
        log.close()

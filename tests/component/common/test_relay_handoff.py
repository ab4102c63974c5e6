"""A relay in the process that writes its log is handed each commit's announcements in
memory (``services.common.relay.Handoff``): it sends exactly what a relay reading the log
back sends, in log order, without reading those positions back; and it reads the log
itself, from its position, whenever the next position was not handed off (a commit of
another process, a commit whose outcome was unknown, a relay that just took over). On the
zero-setup store (SQLite), with a list standing in for the topic; for both logs whose
relays run inline (Publication's and the Journal's)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from imprint.contracts.registry import topic_of
from imprint.contracts.runtime import AnswerPart, EvidenceItem, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from imprint.journal.announcements import ANNOUNCED_TOPICS as JOURNAL_TOPICS
from imprint.journal.execution import AnswerExecution
from imprint.publication.announcements import ANNOUNCED_TOPICS
from services.common.inbound import Inbound
from services.common.handoff import Handoff
from services.common.hot_cache import IN_MEMORY_OVERHEAD
from services.common.relay import Relay
from services.common.settings import Settings
from services.publication.relay import RELAY_NAME, announce_publication
from services.publication.sealing import BatchOpener
from services.journal.application import open_journal
from services.journal.relay import RELAY_NAME as JOURNAL_RELAY, BatchAnnouncer
from services.publication.application import open_log
from tests.support import runs


class Topic_:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def publish_many(self, items: Any) -> None:
        self.messages.extend(message for _, message in items)


class CountedReads:
    """The log's recorder, counting the notification reads a relay makes."""

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self.reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder, name)

    def select_notifications(self, start: int, limit: int, **kwargs: Any) -> Any:
        self.reads.append(start)
        return self._recorder.select_notifications(start=start, limit=limit, **kwargs)


def _run(log: Any, run: str, offset: int, parts: int, partition: int = 0) -> int:
    messages: list[Any] = [RunAdmitted(run_id=run, account_id="acct", conversation_id=f"conv-{run}", message_id="m",
                                       question="q", qcs=QuestionConditionSet(qcs_id="qcs"))]
    messages += [AnswerPart(run_id=run, turn_id="t", tool_call_id=f"{run}-k{i}", sealed=True,
                            arguments={"markdown": f"Block {i} of {run}."}) for i in range(parts)]
    for i, message in enumerate(messages):  # one commit per message, as under a trickle
        log.process([Inbound(str(Topic.RUNTIME), partition, offset + i, message, size=100)], lambda items: None)
    return offset + len(messages)


def _relay(log: Any, topic: Topic_, handoff: Handoff | None) -> Relay:
    # No polling of the log while quiet within a test (SQLite has no NOTIFY): every read it
    # makes is one the hand-off sent it to.
    return Relay(log, announce_publication, topic, name=RELAY_NAME, to_events=BatchOpener(log.mapper, log.keyring),
                 topics=ANNOUNCED_TOPICS, handoff=handoff, idle_seconds=30)


async def _follow(relay: Relay, until: Any, during: Any = None, timeout: float = 10.0) -> None:
    task = asyncio.create_task(relay.run())
    try:
        if during is not None:
            while not relay.active:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(during)
        deadline = asyncio.get_running_loop().time() + timeout
        while not until():
            assert asyncio.get_running_loop().time() < deadline, "the relay did not get there"
            await asyncio.sleep(0.02)
    finally:
        relay.stop()
        await task


def _sent(batch: list[tuple[int, Any]]) -> list[Any]:
    return [message for _, items in batch for _, message in items]


def _wire(messages: list[Any]) -> list[str]:
    return [m.model_dump_json() for m in messages]


@pytest.mark.rule("P14")
def test_a_relay_handed_its_commits_sends_what_a_log_read_sends_without_reading_them_back(tmp_path: Path) -> None:
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        _run(log, "run-warm", 0, parts=1)  # committed before the relay leads: read from the log
        handoff, sent = Handoff(announce_publication, ANNOUNCED_TOPICS), Topic_()
        log.handoff = handoff
        relay = _relay(log, sent, handoff)
        counted = CountedReads(log.recorder)
        relay._recorder = counted
        asyncio.run(_follow(relay, lambda: relay.position == log.recorder.max_notification_id(),
                            during=lambda: _run(log, "run-a", 100, parts=6)))
        reference = _sent(_relay(log, Topic_(), None)._read(0))  # what a relay reading the log back sends

        assert _wire(sent.messages) == _wire(reference), "the same messages, byte for byte, in log order"
        assert len([m for m in sent.messages if m.type == "answer.published"]) == 7
        handed_first = min(n.id for n in log.recorder.select_notifications(start=1, limit=1000)
                           if n.originator_id == log.run("run-a").id)
        assert all(start <= handed_first for start in counted.reads), \
            "run-a's positions were handed off, never read back"
    finally:
        log.close()


@pytest.mark.rule("P14")
def test_what_was_not_handed_off_is_read_from_the_log_in_order(tmp_path: Path) -> None:
    """Commits of another process (a writer with no hand-off) and a commit whose outcome
    was unknown are read from the log; everything still goes out once, in log order."""
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    other = open_log(Settings(state_dir=tmp_path, database_url=None))  # another process's writer
    try:
        handoff, sent = Handoff(announce_publication, ANNOUNCED_TOPICS), Topic_()
        log.handoff = handoff
        relay = _relay(log, sent, handoff)

        def interleaved() -> None:
            offset = _run(log, "run-a", 0, parts=2)
            _run(other, "run-b", 0, parts=2, partition=1)  # a gap in what was handed off
            offset = _run(log, "run-c", offset, parts=2)
            handoff.missed()  # as after a commit whose outcome was unknown
            _run(log, "run-d", offset, parts=1)

        asyncio.run(_follow(relay, lambda: relay.position == log.recorder.max_notification_id(), during=interleaved))
        assert _wire(sent.messages) == _wire(_sent(_relay(log, Topic_(), None)._read(0)))
        assert {m.run_id for m in sent.messages} == {"run-a", "run-b", "run-c", "run-d"}
    finally:
        other.close()
        log.close()


class Recorded:
    """A recording as the hand-off reads it: its event, its notification's id, topic and stored bytes."""

    def __init__(self, position: int, stored_bytes: int = 10) -> None:
        self.domain_event = f"event {position}"
        self.notification = type("N", (), {"id": position, "topic": "t", "state": b"x" * stored_bytes})()


@pytest.mark.rule("P14")
def test_the_handoff_gives_only_runs_that_continue_the_position() -> None:
    handoff = Handoff(lambda event: [(Topic.PUBLICATION, event)])
    assert handoff.take(0, 10) == [] and not handoff.is_open
    woken: list[int] = []
    handoff.open(lambda: woken.append(1))


    handoff.committed([Recorded(3), Recorded(4)])
    handoff.committed([Recorded(5)])
    handoff.committed([Recorded(8)])  # 6 and 7: another process's, or a rolled-back insert's
    assert len(woken) == 3
    assert handoff.take(1, 10) is None, "position 2 was not handed off: read the log"
    assert [p for p, _ in handoff.take(2, 2) or []] == [3, 4], "at most the batch size"
    assert [p for p, _ in handoff.take(4, 10) or []] == [5]
    assert handoff.take(5, 10) is None, "the gap before 8"
    assert [p for p, _ in handoff.take(7, 10) or []] == [8], "once the log read covered the gap"
    assert handoff.take(8, 10) == [], "nothing waiting"
    handoff.committed([Recorded(9)])
    handoff.missed()
    assert handoff.take(8, 10) is None, "after a missed commit the log is read first"
    assert [p for p, _ in handoff.take(8, 10) or []] == [9]
    handoff.close()
    handoff.committed([Recorded(10)])
    assert handoff.take(9, 10) == [] and len(woken) == 5, "a standby's relay is handed nothing"


@pytest.mark.rule("P14")
def test_the_handoff_is_bounded_in_bytes_and_past_its_bound_the_relay_reads_the_log() -> None:
    handoff = Handoff(lambda event: [(Topic.PUBLICATION, event)], max_bytes=int(1000 * IN_MEMORY_OVERHEAD))
    handoff.open(lambda: None)
    handoff.committed([Recorded(1, 400), Recorded(2, 400)])
    assert handoff.held == 2 * int(400 * IN_MEMORY_OVERHEAD)
    assert [p for p, _ in handoff.take(0, 1) or []] == [1] and handoff.held == int(400 * IN_MEMORY_OVERHEAD)
    handoff.committed([Recorded(3, 400)])
    handoff.committed([Recorded(4, 400)])  # past the bound: the waiting entries go
    assert handoff.held == 0
    assert handoff.take(1, 10) is None, "what was dropped is read from the log"
    handoff.committed([Recorded(5, 100)])
    assert [p for p, _ in handoff.take(4, 10) or []] == [5] and handoff.held == 0


def _journal_run(journal: Any, run: str, offset: int) -> int:
    """A run's whole life on the runtime topic, one commit per message, evidence with titles
    and an answer (sealed in the journal's events: announced opened, X4)."""
    messages: list[Any] = [*runs.opened(runs.admitted(run, account_id="acct", question=f"What of {run}?")),
                           runs.granted(run, "src-a", scope="public", owner_account_id="acct", title="Title A"),
                           runs.completed(run, f"The answer of {run}.",
                                          EvidenceItem(source_id="src-a", title="Title A", excerpt="An excerpt."))]
    for i, message in enumerate(messages):
        journal.process([Inbound(str(topic_of(message)), 0, offset + i, message, size=100)])
    return offset + len(messages)


@pytest.mark.rule("X4")
def test_the_journals_relay_handed_its_commits_sends_what_a_log_read_sends_without_reading_them_back(
        tmp_path: Path) -> None:
    journal = open_journal(Settings(state_dir=tmp_path, database_url=None))
    try:
        offset = _journal_run(journal, "run-warm", 0)  # committed before the relay leads: read from the log
        announcer, sent = BatchAnnouncer(journal), Topic_()
        handoff = Handoff(announcer.handed, JOURNAL_TOPICS)
        journal.handoff = handoff
        relay = Relay(journal, announcer, sent, name=JOURNAL_RELAY, to_events=announcer.to_events, topics=JOURNAL_TOPICS,
                      handoff=handoff, idle_seconds=30)
        counted = CountedReads(journal.recorder)
        relay._recorder = counted
        asyncio.run(_follow(relay, lambda: relay.position == journal.recorder.max_notification_id(),
                            during=lambda: _journal_run(journal, "run-a", offset)))
        reader = BatchAnnouncer(journal)
        reference = _sent(Relay(journal, reader, Topic_(), name=JOURNAL_RELAY, to_events=reader.to_events,
                                topics=JOURNAL_TOPICS)._read(0))

        assert _wire(sent.messages) == _wire(reference), "the same messages, byte for byte, in log order"
        closed = [m for m in sent.messages if m.type == "run.closed" and m.run_id == "run-a"]
        assert len(closed) == 1 and closed[0].answer_text == "The answer of run-a."
        assert [e.title for e in closed[0].evidence] == ["Title A"]
        handed_first = min(n.id for n in journal.recorder.select_notifications(start=1, limit=1000)
                           if n.originator_id == AnswerExecution.id_for("run-a"))
        assert all(start <= handed_first for start in counted.reads), \
            "run-a's positions were handed off, never read back"
    finally:
        journal.close()

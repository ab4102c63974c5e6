"""X8 in the Publication log, in-process over real PostgreSQL: bodies are ciphertext at
rest, a conversation deletion withdraws its blocks and destroys the key, and nothing
new is committed for it afterwards."""

from __future__ import annotations

import uuid

import pytest

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.runtime import AnswerPart, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.publication.sealing import REMOVED
from services.publication.application import PublicationLog, open_log
from tests.support.dump import dump_schema

pytestmark = pytest.mark.integration


class Feed:
    """Numbered positions on one partition, as the consumer would hand them over."""

    def __init__(self) -> None:
        self.offset = -1
        self.emitted: list = []

    def __call__(self, topic: Topic, *messages: object) -> list[Inbound]:
        batch = []
        for message in messages:
            self.offset += 1
            batch.append(Inbound(topic.value, 0, self.offset, message, size=100))
        return batch

    def emit(self, items) -> None:
        self.emitted.extend(message for _, message in items)


def admitted(run: str, conversation: str, account: str = "acct") -> RunAdmitted:
    return RunAdmitted(run_id=run, account_id=account, conversation_id=conversation, message_id=f"m-{run}",
                       question="q", qcs=QuestionConditionSet(qcs_id=f"qcs-{run}"))


def committed_bodies(log: PublicationLog, run_id: str) -> list[str]:
    """The bodies of the run's commits as the log reads back (its seals opened, or not)."""
    events = map(log.mapper.to_domain_event, log.recorder.select_notifications(start=1, limit=100_000))
    return [e.block["content"]["markdown"] for e in events
            if type(e).__name__ == "BlockRevisionCommitted" and e.run_id == run_id]


def part(run: str, call: str, markdown: str) -> AnswerPart:
    return AnswerPart(run_id=run, turn_id="t", tool_call_id=call, sealed=True, arguments={"markdown": markdown})


@pytest.mark.rule("X8")
def test_bodies_are_sealed_at_rest_and_shredded_by_conversation_deletion(isolated: Settings) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    log, feed = open_log(isolated), Feed()
    try:
        log.process(feed(Topic.RUNTIME, admitted("r1", "c1"), admitted("r2", "c1"), admitted("r3", "c-other"),
                         part("r1", "k1", f"{secret} one"), part("r2", "k2", f"{secret} two"),
                         part("r3", "k3", "kept body")), feed.emit)
        assert secret not in dump_schema(isolated), "bodies are ciphertext in the log"
        assert committed_bodies(log, "r1") == [f"{secret} one"], "the log reads back opened while the key lives"

        log.process(feed(Topic.CONTROL, ConversationDeleteRequested(conversation_id="c1", account_id="acct")),
                    feed.emit)
        assert log.keyring.is_destroyed("c1")
        for run_id in ("r1", "r2"):
            run = log.run(run_id)
            assert run.live_blocks() == []
            assert committed_bodies(log, run_id) == [REMOVED]
        assert committed_bodies(log, "r3") == ["kept body"]

        # After deletion: a late proposal for a run of the conversation is refused, not committed.
        log.process(feed(Topic.RUNTIME, part("r1", "k4", f"{secret} late")), feed.emit)
        assert log.run("r1").settled("tool:k4") is None
        assert log.run("r1").live_blocks() == []
        assert secret not in dump_schema(isolated)
    finally:
        log.close()


@pytest.mark.rule("X8")
@pytest.mark.rule("D6")
def test_only_the_owner_can_delete_a_conversation(isolated: Settings) -> None:
    log, feed = open_log(isolated), Feed()
    try:
        log.process(feed(Topic.RUNTIME, admitted("r1", "c1", account="owner"), part("r1", "k1", "mine")), feed.emit)
        log.process(feed(Topic.CONTROL, ConversationDeleteRequested(conversation_id="c1", account_id="intruder")),
                    feed.emit)
        assert not log.keyring.is_destroyed("c1")
        assert committed_bodies(log, "r1") == ["mine"]
    finally:
        log.close()


@pytest.mark.rule("X8")
def test_a_deletion_that_arrives_before_the_admission_still_wins(isolated: Settings) -> None:
    """Deleted first (e.g. the runtime topic lags): the conversation is remembered as
    deleted, so a late admission into it never gets a body committed."""
    log, feed = open_log(isolated), Feed()
    try:
        log.process(feed(Topic.CONTROL, ConversationDeleteRequested(conversation_id="c-early", account_id="acct")),
                    feed.emit)
        log.process(feed(Topic.RUNTIME, admitted("r-late", "c-early"), part("r-late", "k1", "never stored")),
                    feed.emit)
        run = log.run("r-late")
        assert run is not None and run.live_blocks() == []
        assert run.settled("tool:k1") is None
        assert "never stored" not in dump_schema(isolated)
    finally:
        log.close()

"""The relay's own fence (issue 12.3): a relay that is no longer the elected one — it read
and produced a batch another relay has already recorded — cannot record that position; it
steps down instead of moving the log's position. On the zero-setup store (SQLite), with a
list standing in for the topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from imprint.contracts.runtime import AnswerPart, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from services.common.inbound import Inbound
from services.common.relay import LostLeadership, Relay
from services.common.settings import Settings
from services.publication.relay import RELAY_NAME, announce_publication
from services.publication.sealing import BatchOpener
from services.publication.application import open_log


class Topic_:
    def __init__(self) -> None:
        self.messages: list = []

    async def publish_many(self, items) -> None:  # type: ignore[no-untyped-def]
        self.messages.extend(message for _, message in items)


@pytest.mark.rule("P14")
def test_a_relay_that_lost_its_election_cannot_record_and_steps_down(tmp_path: Path) -> None:
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        run = "run-fence"
        messages = [RunAdmitted(run_id=run, account_id="acct", conversation_id="conv", message_id="m", question="q",
                                qcs=QuestionConditionSet(qcs_id="qcs"))]
        messages += [AnswerPart(run_id=run, turn_id="t", tool_call_id=f"k{i}", sealed=True,
                                arguments={"markdown": f"Block {i}."}) for i in range(5)]
        log.process([Inbound(str(Topic.RUNTIME), 0, i, m, size=100) for i, m in enumerate(messages)],
                    lambda items: None)
        topic = Topic_()
        active = Relay(log, announce_publication, topic, name=RELAY_NAME, to_events=BatchOpener(log.mapper, log.keyring))
        zombie = Relay(log, announce_publication, topic, name=RELAY_NAME, to_events=BatchOpener(log.mapper, log.keyring))

        stale = zombie._read(0)  # the zombie read before the active relay recorded anything
        covered = asyncio.run(active.relay_once())
        assert covered == len(stale) and active.recorded_position() == stale[-1][0]
        with pytest.raises(LostLeadership):
            asyncio.run(zombie._produce(stale))  # produced (a re-send), but it may not record
        assert active.recorded_position() == stale[-1][0] and zombie.position == 0
        published = [m for m in topic.messages if m.type == "answer.published"]
        assert len(published) == 10 and len({m.event_id for m in published}) == 5, "only identical re-sends"
        assert sorted(m.block.content.markdown for m in published[:5]) == [f"Block {i}." for i in range(5)]
    finally:
        log.close()

"""``imprint recover`` against a real runtime journal and a real Publication log in one
PostgreSQL schema, and Kafka for the save-unknowns (R2, R5, R7, P15, P19).

The seed's crash window: Publication committed block A, then the process that would
have carried the announcement to the runtime journal died — the journal recorded
blocks B and C, never A. The journal is consulted read-only; the answer view is
never built from it."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaProducer

from imprint.contracts.registry import encode
from imprint.contracts.runtime import RunQueued, RunStarted, ToolReceipt
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun
from imprint.publication.announcements import announce, save_unknown_for
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.journal.application import RuntimeJournal
from services.publication.application import open_log
from services.recovery import cli
from tests.integration.recovery.recovery_support import admitted, replay_lines, run_cli, table_exists
from tests.integration.recovery.test_recovery import write_run

pytestmark = pytest.mark.integration


def committed_announcements(settings: Settings, run_id: str) -> list[object]:
    """What the relay would announce for the run, read from the committed log."""
    app = open_log(settings)
    try:
        stored = app.recorder.select_events(PublicationRun.id_for(run_id))
        return [m for m in (announce(app.mapper.to_domain_event(s)) for s in stored) if m is not None]
    finally:
        app.close()


def journal_sees(settings: Settings, *messages: object) -> None:
    """Feed a real journal (its own store in the same schema), as its consumer would."""
    journal = RuntimeJournal.from_settings(settings)
    try:
        offsets: dict[str, int] = {}
        batch = []
        for message in messages:
            topic = Topic.PUBLICATION.value if message.type.startswith("answer.") else Topic.RUNTIME.value  # type: ignore[attr-defined]
            offsets[topic] = offsets.get(topic, -1) + 1
            batch.append(Inbound(topic, 0, offsets[topic], message))
        journal.process(batch)
    finally:
        journal.close()


def announce_save_unknown(settings: Settings, run_id: str, candidate_id: str) -> None:
    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
        await producer.start()
        try:
            message = save_unknown_for(run_id, candidate_id)
            await producer.send_and_wait(settings.topic(Topic.PUBLICATION), encode(message), key=run_id.encode())
        finally:
            await producer.stop()

    asyncio.run(send())


@pytest.mark.rule("R7")
@pytest.mark.rule("R2")
@pytest.mark.rule("R5")
@pytest.mark.rule("P19")
@pytest.mark.rule("P15")
def test_recover_reports_the_crash_window_block_the_journal_never_recorded(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a, b, c = blocks["tool:call-a"], blocks["tool:call-b"], blocks["text:turn-1:0"]
    published = committed_announcements(isolated, "run-1")
    seen = [m for m in published if getattr(m, "block", None) is None or m.block.block_id != a]  # type: ignore[attr-defined]
    assert len(seen) == len(published) - 1
    journal_sees(isolated, admitted("run-1"), RunQueued(run_id="run-1"), RunStarted(run_id="run-1"),
                 ToolReceipt(run_id="run-1", tool_call_id="call-b", status="ok"), *seen)
    announce_save_unknown(isolated, "run-1", "tool:call-never-settled")
    tables_before = table_exists(isolated, "journal_events")

    code, out, err = run_cli(cli.recover, isolated, "run-1")
    assert code == 0, err
    document = json.loads(out)
    (report,) = document["runs"]
    assert document["journal"]["availability"] == "consulted"
    unjournaled = report["committed_unjournaled"]
    assert unjournaled["journal_consulted"] is True
    assert [(x["block_id"], x["revision"], x["status"]) for x in unjournaled["blocks"]] == [(a, 1, "live")]
    assert {x["block_id"]: x["journaled"] for x in report["committed_blocks"]} == {a: False, b: True, c: True}
    # P19: call-a's effect settled, the journal holds no tool receipt for it; call-b's receipt is ok
    assert [(e["tool_call_id"], e["receipt"]) for e in report["missing_tool_receipts"]["effects"]] == [
        ("call-a", "missing")]
    # P15: a save-unknown announced on Kafka whose candidate the log never settled
    assert [(u["fact"], u["candidate_id"]) for u in report["save_unknowns"]["unresolved"]] == [
        ("save_unknown", "tool:call-never-settled")]

    # R2/R5: the block the journal never saw is in the answer view all the same
    _, lines = replay_lines(isolated, "run-1")
    assert a in [blk["block_id"] for blk in lines[0]["view"]["blocks"]]

    code, out, _ = run_cli(cli.recover, isolated, "run-1", True)
    applied = json.loads(out)["applied"]
    assert sorted((x["kind"], x["block_id"] or x["candidate_id"]) for x in applied if x["appended"]) == sorted([
        ("committed_unjournaled", a), ("effect_confirmed", a), ("save_not_committed", "tool:call-never-settled")])
    again = json.loads(run_cli(cli.recover, isolated, "run-1", True)[1])
    assert not any(x["appended"] for x in again["applied"] or ())  # idempotent
    assert again["runs"][0]["committed_unjournaled"]["blocks"][0]["reconciled"] is True
    assert tables_before and replay_lines(isolated, "run-1")[1][0]["view"] == lines[0]["view"]  # nothing moved

    # read-only: the journal's store is unchanged by recovery (no event, no table)
    journal = RuntimeJournal.from_settings(isolated)
    try:
        execution = journal.execution("run-1")
        assert execution is not None and {e.block_id for e in execution.effects} == {b, c}
    finally:
        journal.close()


@pytest.mark.rule("R7")
def test_recover_without_any_journal_store_creates_none_and_says_so(isolated: Settings) -> None:
    write_run(isolated)
    code, out, _ = run_cli(cli.recover, isolated, "run-1", read_kafka=False)
    document = json.loads(out)
    assert code == 0 and document["journal"]["availability"] == "absent"
    assert len(document["runs"][0]["committed_unjournaled"]["blocks"]) == 3
    assert not table_exists(isolated, "journal_events")  # consulting it created nothing
    assert document["announcements"]["available"] is False

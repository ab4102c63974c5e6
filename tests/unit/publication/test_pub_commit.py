"""P15 (one commit, one transaction; save-unknown read-back), P17, P19, P20,
and the aggregate's persistence through eventsourcing (snapshots)."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError
from hypothesis import given, settings
from hypothesis import strategies as st
from pub_helpers import PUBLIC, candidate, commit_one, new_run, registry


from imprint.contracts.publication import AnswerSaveFailed, AnswerSaveUnknown
from imprint.publication import (
    Commit,
    PublicationRun,
    Rejected,
    announce_all,
    receipt_id_for,
    save_unknown_for,
)
from imprint.publication.tokens import token
from imprint.recovery.integrity import body_sha256


class PublicationApp(Application):
    is_snapshotting_enabled = True


@pytest.fixture
def app() -> PublicationApp:
    return PublicationApp(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})


@pytest.mark.rule("P15")
def test_one_settlement_is_one_batch_of_events(run: PublicationRun) -> None:
    run.settle(candidate(blocks=[{"markdown": "a"}, {"markdown": ""}, {"markdown": "b"}]), registry())
    events = run.collect_events()
    assert [type(e).__name__ for e in events] == ["BlockRevisionCommitted", "BlockRejected", "BlockRevisionCommitted"]
    assert [e.originator_version for e in events] == list(range(events[0].originator_version, events[0].originator_version + 3))


@pytest.mark.rule("P15")
def test_the_receipt_is_the_commit_event(run: PublicationRun) -> None:
    commit = commit_one(run, "durable")
    (event,) = run.collect_events()
    record = run.block(commit.block_id)
    assert record is not None and record.receipt is not None
    assert record.receipt["log_position"] == event.originator_version
    assert record.receipt["committed_at"] == event.timestamp.isoformat()
    assert record.receipt["receipt_id"] == receipt_id_for(commit.block_id, 1) == event.receipt_id
    uuid.UUID(record.receipt["receipt_id"])


@pytest.mark.rule("P15")
@settings(max_examples=300, deadline=None)
@given(block_id=st.text(max_size=60), revision=st.integers(min_value=0, max_value=10**9))
def test_a_receipt_id_is_the_uuid5_of_its_block_revision(block_id: str, revision: int) -> None:
    """Receipt ids are deterministic: every reader and writer of the log derives the same one."""
    from imprint.publication.run import RECEIPT_NAMESPACE

    expected = uuid.uuid5(RECEIPT_NAMESPACE, f"{block_id}:{revision}")
    assert receipt_id_for(block_id, revision) == str(expected)
    assert uuid.UUID(receipt_id_for(block_id, revision)).version == 5


@pytest.mark.rule("P15")
@pytest.mark.rule("P19")
def test_save_unknown_is_resolved_by_reading_back_the_candidate(app: PublicationApp) -> None:
    run = new_run(pending=True)
    proposal = candidate(tool_call_id="call-unknown", markdown=f"body {token('cite', PUBLIC)}")
    run.settle(proposal, registry())
    app.save(run)  # COMMIT reached the database; suppose the confirmation was lost
    unknown = save_unknown_for(run.run_id, proposal.candidate_id)
    assert isinstance(unknown, AnswerSaveUnknown)
    assert save_unknown_for(run.run_id, proposal.candidate_id).event_id == unknown.event_id
    read_back: PublicationRun = app.repository.get(PublicationRun.id_for(run.run_id))
    outcome = read_back.settled(proposal.candidate_id)
    assert outcome is not None and [b.kind for b in outcome.blocks] == ["committed"]
    assert outcome.blocks[0].receipt is not None and outcome.blocks[0].receipt.log_position == read_back.version
    # nothing is re-executed: the redelivered candidate appends nothing
    assert read_back.settle(proposal, registry()) == () and read_back.collect_events() == []


@pytest.mark.rule("P15")
def test_an_unsaved_settlement_reads_back_as_not_settled(app: PublicationApp) -> None:
    run = new_run(pending=True)
    app.save(run)
    proposal = candidate(tool_call_id="call-lost", markdown="never saved")
    run.settle(proposal, registry())  # the COMMIT never reached the database
    read_back: PublicationRun = app.repository.get(run.id)
    assert read_back.settled(proposal.candidate_id) is None
    assert read_back.live_blocks() == []


@pytest.mark.rule("P15")
@pytest.mark.rule("P14")
def test_a_failed_save_leaves_a_failure_fact_and_no_promoted_preview(app: PublicationApp) -> None:
    run = new_run(pending=True)
    app.save(run)
    proposal = candidate(tool_call_id="call-fail", markdown="previewed only")
    prepared = run.prepare(proposal, registry())
    assert isinstance(prepared[0], Commit)
    read_back: PublicationRun = app.repository.get(run.id)  # the failed batch is gone with the transaction
    read_back.record_save_failure(proposal.candidate_id, "serialization failure", [prepared[0].block_id])
    app.save(read_back)
    again: PublicationRun = app.repository.get(run.id)
    assert again.settled(proposal.candidate_id) is None and again.live_blocks() == []
    assert again.save_failures == {proposal.candidate_id: "serialization failure"}
    stored = list(app.events.get(run.id))
    assert [type(m) for m in announce_all(stored)] == [AnswerSaveFailed]


@pytest.mark.rule("P15")
@pytest.mark.rule("P17")
def test_concurrent_writers_conflict_instead_of_last_writer_wins(app: PublicationApp) -> None:
    run = new_run(pending=True)
    first = commit_one(run, "v1")
    app.save(run)
    a: PublicationRun = app.repository.get(run.id)
    b: PublicationRun = app.repository.get(run.id)
    a.settle(candidate(markdown="writer A", replaces=first.block_id), registry())
    b.settle(candidate(markdown="writer B", replaces=first.block_id), registry())
    app.save(a)
    with pytest.raises(IntegrityError):
        app.save(b)
    current: PublicationRun = app.repository.get(run.id)
    assert current.block(first.block_id).body_sha256 == body_sha256("writer A")  # type: ignore[union-attr]


@pytest.mark.rule("P17")
@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["new", "modify", "same"]), st.integers(0, 5), st.text("ab ", max_size=4)), max_size=25))
def test_a_block_revision_is_committed_with_exactly_one_body(ops: list[tuple[str, int, str]]) -> None:
    run = new_run(pending=True)
    ids: list[str] = []
    bodies: dict[str, str] = {}
    for op, pick, text in ops:
        if op == "new" or not ids:
            body = f"block {len(ids)} {text}"
            decision = run.settle(candidate(markdown=body), registry())[0]
            if isinstance(decision, Commit):
                ids.append(decision.block_id)
                bodies[decision.block_id] = body
        else:
            target = ids[pick % len(ids)]
            body = bodies[target] if op == "same" else f"{target} {text} {pick}"
            if isinstance(run.settle(candidate(markdown=body, replaces=target), registry())[0], Commit):
                bodies[target] = body
    commits = [e for e in run.collect_events() if type(e).__name__ == "BlockRevisionCommitted"]
    keys = [(e.block["block_id"], e.block["revision"]) for e in commits]
    assert len(keys) == len(set(keys))


@pytest.mark.rule("P20")
def test_later_failures_keep_earlier_commits(run: PublicationRun) -> None:
    first = commit_one(run, f"committed {token('cite', PUBLIC)}")
    before = run.block(first.block_id)
    run.settle(candidate(markdown=""), registry())
    run.settle(candidate(markdown="x", replaces="blk_nope"), registry())
    run.settle(candidate(markdown=f"bad {token('cite', 'src:private:acct-2:portfolio')}"), registry())
    run.record_save_failure("tool:call-later", "provider failed")
    assert run.block(first.block_id) == before
    assert [b.block_id for b in run.live_blocks()] == [first.block_id]


@pytest.mark.rule("X8")
def test_a_run_holds_no_body_its_commit_events_do() -> None:
    """A run keeps what later decisions read of each block (identity, digests, bindings,
    receipt), never its body or view: the runs in flight stay in memory, and a snapshot
    then has no body to seal or to outlive a deletion."""
    run = new_run(pending=True)
    body = f"a body of its own {uuid.uuid4().hex}"
    commit = commit_one(run, f"{body} {token('cite', PUBLIC)}")
    state = repr({name: value for name, value in vars(run).items() if name != "_pending_events"})
    assert body not in state and "markdown" not in state
    kept = run.block(commit.block_id)
    assert kept is not None and kept.body_sha256 == commit.block.body_sha256
    (event,) = [e for e in run.collect_events() if type(e).__name__ == "BlockRevisionCommitted"]
    assert event.block["content"]["markdown"].startswith(body)


@pytest.mark.rule("P15")
def test_snapshot_round_trip(app: PublicationApp) -> None:
    run = new_run(pending=True)
    a = commit_one(run, f"A {token('cite', PUBLIC)} {token('num', 'num-weight')}", display={"labels": ["Key"]})
    commit_one(run, f"B builds on {token('ref', a.block_id)}")
    run.settle(candidate(markdown="A2", replaces=a.block_id), registry())
    run.settle(candidate(markdown=""), registry())
    run.consume_preview_quota("tool:call-x", 0, a.block_id)
    run.withdraw_for_source(PUBLIC, "source_revoked")
    app.save(run)
    app.take_snapshot(run.id)
    snapshots = list(app.snapshots.get(run.id))  # type: ignore[union-attr]
    assert len(snapshots) == 1
    restored: PublicationRun = app.repository.get(run.id)
    assert restored.version == run.version
    state = {k: v for k, v in vars(run).items() if k != "_pending_events"}
    assert {k: v for k, v in vars(restored).items() if k != "_pending_events"} == state
    # the restored run keeps deciding the same way
    proposal = candidate(tool_call_id="call-after", markdown="after snapshot")
    assert [d.block.block_id for d in restored.prepare(proposal, registry())] == [  # type: ignore[union-attr]
        d.block.block_id for d in run.prepare(proposal, registry())  # type: ignore[union-attr]
    ]


@pytest.mark.rule("P15")
def test_every_event_type_survives_the_json_transcoder(app: PublicationApp) -> None:
    from imprint.publication import intake
    from imprint.contracts.runtime import ModelReasoning

    run = new_run(pending=True)
    run.refuse_candidate(intake(ModelReasoning(run_id=run.run_id, text="x")))  # type: ignore[arg-type]
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    run.settle(candidate(markdown=f"A {token('cite', PUBLIC)}"), registry())  # unchanged
    run.settle(candidate(markdown=""), registry())  # rejected
    run.settle(candidate(markdown="x", replaces="nope"), registry())  # revision rejected
    run.consume_preview_quota("tool:c", 0, a.block_id)
    run.record_save_failure("tool:c", "boom")
    run.withdraw_for_source(PUBLIC, "source_tombstoned")
    pending = list(run.pending_events)
    app.save(run)
    stored = list(app.events.get(run.id))
    names = {type(e).__name__ for e in stored}
    assert names >= {
        "Opened", "Admitted", "EvidenceGranted", "NumericIssued", "CandidateRefused", "BlockRevisionCommitted",
        "CandidateUnchanged", "BlockRejected", "RevisionRejected", "PreviewQuotaConsumed", "SaveFailed", "BlockWithdrawn",
    }
    assert [m.model_dump() for m in announce_all(stored[-len(pending):])] == [m.model_dump() for m in announce_all(pending)]
    assert isinstance(run.settle(candidate(markdown=""), registry())[0], Rejected)


@pytest.mark.rule("R1")
def test_aggregate_ids_are_the_uuid5_of_their_names_however_often_they_are_asked() -> None:
    """The log is read back by id: a remembered id is the id itself, for more names than
    are remembered, and an aggregate made by its constructor gets the same one."""
    from imprint.ids import REMEMBERED_IDS
    from imprint.journal import ids as journal_ids
    from imprint.publication.conversations import CONVERSATION_NAMESPACE, ConversationRuns
    from imprint.publication.run import RUN_NAMESPACE
    from imprint.publication.sources import SOURCE_NAMESPACE, SourceDependents, SourceRecord

    names = [f"name-{i}" for i in range(REMEMBERED_IDS + 10)]
    for _ in range(2):
        for name in names[:: REMEMBERED_IDS // 50] + names[-3:]:
            assert PublicationRun.id_for(name) == uuid.uuid5(RUN_NAMESPACE, name)
            assert SourceRecord.id_for(name) == uuid.uuid5(SOURCE_NAMESPACE, name)
            assert SourceDependents.id_for(name, "3") == uuid.uuid5(SOURCE_NAMESPACE, f"{name}#lane:3")
            assert ConversationRuns.id_for(name) == uuid.uuid5(CONVERSATION_NAMESPACE, name)
            assert journal_ids.execution_id(name) == uuid.uuid5(journal_ids.JOURNAL_NAMESPACE, f"run:{name}")
    for name in names:
        PublicationRun.id_for(name)
    assert PublicationRun("run-made").id == uuid.uuid5(RUN_NAMESPACE, "run-made")
    assert SourceDependents("src-made", shard="7").id == uuid.uuid5(SOURCE_NAMESPACE, "src-made#lane:7")

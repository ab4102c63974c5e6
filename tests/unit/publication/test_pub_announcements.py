"""Committed events → ``imprint.publication.v1`` messages (P14), deterministic ids."""

from __future__ import annotations

import pytest
from eventsourcing.application import Application
from pub_helpers import PRIVATE_OTHER, PUBLIC, candidate, commit_one, new_run, registry

from imprint.contracts.publication import (
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerUnchanged,
    AnswerWithdrawn,
    publication_messages,
)
from imprint.contracts.registry import decode, encode
from imprint.contracts.topics import Topic
from imprint.publication import (
    PublicationRun,
    announce,
    announce_all,
    announcement_id,
    relied_sources,
    sources_to_check,
)
from imprint.publication.tokens import token


@pytest.mark.rule("P14")
@pytest.mark.rule("P11")
@pytest.mark.rule("P12")
@pytest.mark.rule("P8")
@pytest.mark.rule("P21")
def test_each_committed_event_announces_one_message() -> None:
    run = new_run()
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    run.settle(candidate(markdown=f"A {token('cite', PUBLIC)}", replaces=a.block_id), registry())
    run.settle(candidate(markdown=f"bad {token('cite', PRIVATE_OTHER)}"), registry())
    run.settle(candidate(markdown="x", replaces="blk_nope"), registry())
    run.withdraw_for_source(PUBLIC, "source_revoked")
    messages = announce_all(run.collect_events())
    assert [type(m) for m in messages] == [AnswerPublished, AnswerUnchanged, AnswerRejected, AnswerRevisionRejected, AnswerWithdrawn]
    assert all(m.run_id == run.run_id for m in messages)
    for message in messages:
        assert decode(Topic.PUBLICATION, encode(message)) == message


@pytest.mark.rule("P14")
def test_events_that_announce_nothing() -> None:
    run = PublicationRun(run_id="r")
    run.note_admission("a", "c")
    run.grant_evidence("s", "public", "p")
    run.issue_numeric("h", "1", "", 1)
    run.consume_preview_quota("tool:c", 0, "blk_x")
    assert announce_all(run.collect_events()) == []
    assert announce(object()) is None


@pytest.mark.rule("P14")
def test_event_ids_are_deterministic_per_log_position() -> None:
    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    run = new_run(pending=True)
    commit_one(run, "hello")
    first = announce_all(run.pending_events)
    app.save(run)
    relayed_once = announce_all(app.events.get(run.id))
    relayed_twice = announce_all(app.events.get(run.id))
    assert [m.event_id for m in relayed_once] == [m.event_id for m in relayed_twice] == [m.event_id for m in first]
    assert [m.model_dump() for m in relayed_once] == [m.model_dump() for m in first]
    (event,) = [e for e in app.events.get(run.id) if isinstance(e, PublicationRun.BlockRevisionCommitted)]
    assert first[0].event_id == announcement_id(event.originator_id, event.originator_version)
    other = new_run(run_id="run-2", pending=True)
    other.settle(candidate(run_id="run-2", markdown="hello"), registry())
    assert announce_all(other.pending_events)[0].event_id != first[0].event_id


@pytest.mark.rule("P8")
def test_rejections_carry_only_client_safe_codes() -> None:
    run = new_run()
    run.settle(candidate(markdown=f"{token('cite', PRIVATE_OTHER)}"), registry())
    (message,) = announce_all(run.collect_events())
    wire = message.model_dump_json()
    assert "private" not in wire and "detail" not in wire
    publication_messages.validate_json(wire)


@pytest.mark.rule("P21")
@pytest.mark.rule("P7")
def test_sources_to_check_and_relied_sources() -> None:
    run = new_run()
    a = commit_one(run, f"A {token('cite', PUBLIC)}")
    proposal = candidate(blocks=[
        {"markdown": f"{token('cite', 'src:new')} on {token('ref', a.block_id)}"},
        {"table": {"columns": ["c"], "rows": [[token("cite", "src:in-table")]]}},
    ])
    needed = sources_to_check(proposal, run.facts())
    assert {"src:new", "src:in-table", PUBLIC} <= needed
    decisions = run.settle(proposal, registry())
    assert relied_sources(decisions) == frozenset({PUBLIC})

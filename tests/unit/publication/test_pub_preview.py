"""P14: preview is not commit."""

from __future__ import annotations

import pytest
from pub_helpers import candidate, registry

from imprint.contracts.publication import AnswerPreview, AnswerPublished, publication_messages
from imprint.publication import Commit, PublicationRun, announce_all, preview_for


@pytest.mark.rule("P14")
def test_prepare_records_nothing(run: PublicationRun) -> None:
    version = run.version
    prepared = run.prepare(candidate(markdown="first paint"), registry())
    assert isinstance(prepared[0], Commit)
    assert run.version == version and run.collect_events() == [] and run.live_blocks() == []


@pytest.mark.rule("P14")
def test_a_preview_is_built_from_a_commit_decision_and_claims_no_durability(run: PublicationRun) -> None:
    prepared = run.prepare(candidate(tool_call_id="call-p", markdown="first paint"), registry())[0]
    assert isinstance(prepared, Commit)
    preview = preview_for(run.run_id, prepared)
    assert isinstance(preview, AnswerPreview) and preview.type == "answer.preview"
    wire = preview.model_dump(mode="json")
    assert "receipt" not in wire["block"]
    assert preview_for(run.run_id, prepared).event_id == preview.event_id
    publication_messages.validate_json(preview.model_dump_json())


@pytest.mark.rule("P14")
def test_published_comes_only_from_the_committed_event(run: PublicationRun) -> None:
    proposal = candidate(tool_call_id="call-p", markdown="first paint")
    prepared = run.prepare(proposal, registry())[0]
    assert isinstance(prepared, Commit)
    preview = preview_for(run.run_id, prepared)
    committed = run.settle(proposal, registry())[0]
    assert isinstance(committed, Commit)
    messages = announce_all(run.collect_events())
    assert [type(m) for m in messages] == [AnswerPublished]
    published = messages[0]
    assert isinstance(published, AnswerPublished)
    assert published.event_id != preview.event_id
    assert published.block.receipt.log_position == run.version
    same = published.block.model_dump(exclude={"receipt"})
    assert same == preview.block.model_dump()
    assert not any(isinstance(m, AnswerPreview) for m in messages)

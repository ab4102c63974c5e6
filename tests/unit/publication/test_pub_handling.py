"""Publication's message policy (``imprint.publication.handling``) over an in-memory
workspace: what each message does to the aggregates, and what it asks of the unit
of work around it — without a database."""

from __future__ import annotations

import pytest
from pub_helpers import ACCOUNT, PUBLIC, RUN, part

from imprint.contracts.control import ConversationDeleteRequested, RunLeaseLapsed
from imprint.contracts.publication import AnswerSettled
from imprint.contracts.runtime import (
    AnswerText,
    EvidenceGranted,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunStopped,
)
from imprint.publication.announcements import announce_all
from imprint.contracts.sources import SourceRegistered, SourceRevoked
from imprint.publication import ConversationRuns, PublicationRun, SourceRecord
from imprint.publication.sources import SourceDependents
from imprint.publication.handling import Context, PollEffects, handle
from imprint.workspace import MemoryWorkspace


def admitted(run_id: str = RUN, account: str = ACCOUNT, conversation: str = "conv-1") -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=account, conversation_id=conversation, message_id=f"m-{run_id}",
                       question="What does the report say?", qcs=QuestionConditionSet(qcs_id=f"q-{run_id}"))


def apply_all(ws: MemoryWorkspace, *messages: object) -> PollEffects:
    """Each message handled, and the unit's effects gathered in order (as its runner does)."""
    effects = [handle(ws, message, Context()) for message in messages]
    return PollEffects([preview for each in effects for preview in each.previews],
                       [settled for each in effects for settled in each.settled],
                       {key for each in effects for key in each.shred})


class Flushing(MemoryWorkspace):
    """Records what was pending at each flush (what a store would have made durable then)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[list[str]] = []

    def flush(self) -> None:
        self.flushed.append([type(e).__name__ for e in self.pending()])


def run_in(ws: MemoryWorkspace, run_id: str = RUN) -> PublicationRun:
    run = ws.get(PublicationRun, PublicationRun.id_for(run_id))
    assert run is not None
    return run


@pytest.mark.rule("X1")
def test_a_candidate_for_a_run_never_admitted_is_refused_and_recorded() -> None:
    ws = MemoryWorkspace()
    unit = apply_all(ws, part(markdown="An answer before any admission."))
    run = run_in(ws)
    assert unit.previews == [] and unit.settled == []
    assert run.blocks == {} and run.candidates == {}
    refused = [e for e in ws.pending() if isinstance(e, PublicationRun.CandidateRefused)]
    assert [e.reason for e in refused] == ["run_not_admitted"]


@pytest.mark.rule("X1")
@pytest.mark.rule("P14")
def test_an_admitted_runs_candidate_is_previewed_and_settled_once() -> None:
    ws = MemoryWorkspace()
    unit = apply_all(ws, admitted(), part(tool_call_id="c-1", markdown="First block."))
    run = run_in(ws)
    (preview,) = unit.previews
    assert preview.type == "answer.preview" and preview.block.content.markdown == "First block."
    assert [entry.candidate_id for entry in unit.settled] == ["tool:c-1"]
    assert [b.kind for b in run.settled("tool:c-1").blocks] == ["committed"]  # type: ignore[union-attr]
    again = apply_all(ws, part(tool_call_id="c-1", markdown="First block."))
    assert again.previews == [] and again.settled == [], "a redelivered candidate is settled already"


@pytest.mark.rule("P13")
def test_a_modification_asks_for_its_quota_to_be_durable_before_the_preview() -> None:
    ws = Flushing()
    apply_all(ws, admitted(), part(tool_call_id="c-1", markdown="Original."))
    (block_id,) = run_in(ws).blocks
    ws.pending()  # as if committed
    effects = handle(ws, part(tool_call_id="c-2", markdown="Revised.", replaces=block_id), Context())
    assert effects.durable_first, "the preview shows quota: it must be recorded first"
    [pending] = ws.flushed
    assert pending == ["PreviewQuotaConsumed"], "the settlement waits for the flush"
    assert effects.then is not None
    assert [type(e).__name__ for e in ws.pending()] == ["BlockRevisionCommitted"]
    new_block = handle(ws, part(tool_call_id="c-3", markdown="Another block."), Context())
    assert not new_block.durable_first, "new blocks use no quota"


@pytest.mark.rule("P21")
def test_a_revocation_withdraws_the_dependent_blocks_of_every_run() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, SourceRegistered(source_id=PUBLIC, scope="public", owner_account_id="publisher", title="r"))
    for run_id in ("run-a", "run-b"):
        apply_all(ws, admitted(run_id, conversation=f"c-{run_id}"),
                  EvidenceGranted(run_id=run_id, source_id=PUBLIC, scope="public", owner_account_id="publisher"),
                  part(run_id=run_id, markdown=f"Cites [[cite:{PUBLIC}]]."))
    record = ws.get(SourceRecord, SourceRecord.id_for(PUBLIC))
    assert record is not None and record.shards == ["0"]
    shard = ws.get(SourceDependents, SourceDependents.id_for(PUBLIC, "0"))
    assert shard is not None and shard.dependents == ["run-a", "run-b"]
    apply_all(ws, part(run_id="run-a", markdown=f"Cites it again [[cite:{PUBLIC}]]."))
    assert shard.dependents == ["run-a", "run-b"], "a run is recorded once per source, however often it cites it"
    apply_all(ws, SourceRevoked(source_id=PUBLIC, reason="takedown"))
    for run_id in ("run-a", "run-b"):
        assert run_in(ws, run_id).live_blocks() == []


@pytest.mark.rule("X8")
def test_a_conversation_deletion_withdraws_its_runs_and_names_the_keys_to_destroy() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(conversation="conv-9"), part(markdown="A body."))
    unit = apply_all(ws, ConversationDeleteRequested(conversation_id="conv-9", account_id=ACCOUNT))
    assert unit.shred == {"conv-9", f"run:{RUN}"}
    assert run_in(ws).live_blocks() == []
    conversation = ws.get(ConversationRuns, ConversationRuns.id_for("conv-9"))
    assert conversation is not None and conversation.deleted
    late = apply_all(ws, part(markdown="After the deletion."))
    assert late.previews == [], "a deleted conversation's run gets no new body"
    stranger = apply_all(ws, admitted("run-x", conversation="conv-x"),
                         ConversationDeleteRequested(conversation_id="conv-x", account_id="someone-else"))
    assert stranger.shred == set(), "only the owner deletes"


@pytest.mark.rule("P15")
def test_the_runs_end_is_recorded_once() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(), RunCompleted(run_id=RUN, outcome="answered"),
              RunCompleted(run_id=RUN, outcome="answered"))
    assert [type(e).__name__ for e in ws.pending()].count("Ended") == 1


def lease_lapsed(run_id: str = RUN) -> RunLeaseLapsed:
    return RunLeaseLapsed(run_id=run_id, account_id=ACCOUNT, conversation_id="conv-1")


@pytest.mark.rule("X10")
@pytest.mark.rule("P20")
def test_a_lapsed_lease_ends_the_run_keeps_its_blocks_and_refuses_what_the_runtime_sends_later() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(), part(markdown="Committed before the runtime was lost."))
    committed = [b.block_id for b in run_in(ws).live_blocks()]
    ws.pending()

    apply_all(ws, lease_lapsed())
    recorded = ws.pending()
    assert [(type(e).__name__, getattr(e, "state", None)) for e in recorded] == [("Ended", "failed"),
                                                                                ("LeaseLapsed", None)]
    assert [(type(m), m.state) for m in announce_all(recorded)] == [(AnswerSettled, "failed")], \
        "Ended is relayed as answer.settled, after every block committed so far"

    late = apply_all(ws, part(markdown="Sent by the runtime that came back."),
                     AnswerText(run_id=RUN, turn_id="turn-9", segment=0, text="Late text."))
    assert late.previews == [] and late.settled == [], "nothing of it is shown or settled"
    refused = [e for e in ws.pending() if type(e).__name__ == "CandidateRefused"]
    assert [(e.reason, e.message_type) for e in refused] == [("run_lost", "answer.part"), ("run_lost", "answer.text")]
    assert [b.block_id for b in run_in(ws).live_blocks()] == committed, "committed blocks stay"

    apply_all(ws, lease_lapsed(), RunCompleted(run_id=RUN, outcome="answered"))
    assert ws.pending() == [], "once: a repeated lapse, and a late terminal event, record nothing"


@pytest.mark.rule("X10")
def test_a_lapse_after_the_runtimes_own_end_keeps_that_end_and_still_refuses_later_proposals() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(), RunCompleted(run_id=RUN, outcome="answered"))
    ws.pending()
    apply_all(ws, lease_lapsed())
    assert [type(e).__name__ for e in ws.pending()] == ["LeaseLapsed"], "answer.settled went out once already"
    assert run_in(ws).ended == "completed"
    apply_all(ws, part(markdown="Late."))
    assert [e.reason for e in ws.pending()] == ["run_lost"]


@pytest.mark.rule("X11")
@pytest.mark.rule("P20")
def test_a_stopped_run_keeps_what_was_committed_before_its_stop_and_settles_nothing_after_it() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(), part(tool_call_id="c-before", markdown="Committed before the stop."))
    committed = [b.block_id for b in run_in(ws).live_blocks()]
    ws.pending()

    apply_all(ws, RunStopped(run_id=RUN))
    recorded = ws.pending()
    assert [(type(m), m.state) for m in announce_all(recorded)] == [(AnswerSettled, "stopped")]

    late = apply_all(ws, part(tool_call_id="c-after", markdown="Sent after the stop."),
                     AnswerText(run_id=RUN, turn_id="turn-9", segment=0, text="Late text."))
    assert late.previews == [] and late.settled == [], "no preview of it is ever shown, nothing is settled"
    refused = [e for e in ws.pending() if type(e).__name__ == "CandidateRefused"]
    assert [(e.reason, e.message_type) for e in refused] == [("run_stopped", "answer.part"),
                                                            ("run_stopped", "answer.text")]
    assert [b.block_id for b in run_in(ws).live_blocks()] == committed, "committed blocks stay"
    apply_all(ws, part(tool_call_id="c-before", markdown="Committed before the stop."))
    assert ws.pending() == [], "a redelivery of what was settled before the stop is that settlement, not a refusal"


@pytest.mark.rule("X11")
def test_a_run_that_completed_still_settles_a_late_proposal() -> None:
    ws = MemoryWorkspace()
    apply_all(ws, admitted(), RunCompleted(run_id=RUN, outcome="answered"))
    ws.pending()
    unit = apply_all(ws, part(tool_call_id="c-late", markdown="After the end."))
    assert len(unit.settled) == 1, "only a stop is a boundary for proposals"

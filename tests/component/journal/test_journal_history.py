"""X4 frozen completion and verified lookup index; X5 no recomputation; X6 generation_unavailable; D5."""

from __future__ import annotations

import pytest
from journal_helpers import ACCOUNT, ANSWER, EXCERPT, OTHER, completed, to_running, tombstoned

from imprint.journal.history import (
    BindingMismatch,
    ExecutionNotFound,
    FrozenRecordMismatch,
    PublicMessage,
    body_sha256,
    project_execution,
    resolve_execution,
)

DELIVERED = {"completed", "received", "rendered"}


def _done(feed, run_id: str = "r1", **kw) -> None:
    feed(*to_running(run_id, **{k: v for k, v in kw.items() if k in ("conversation_id", "message_id")}), completed(run_id, **{k: v for k, v in kw.items() if k in ("outcome", "answer", "sources")}))


def _pointing_m1_at_fails(journal, run_id: str, error: type[Exception]) -> None:
    """Tamper with the index (conv-1/m1 → ``run_id``): resolving m1 must raise ``error``."""
    journal.message_index.point("conv-1", "m1", run_id)
    with pytest.raises(error):
        resolve_execution(journal.message_index, "conv-1", "m1", journal.execution)


# -- X4 ---------------------------------------------------------------------------------------------


@pytest.mark.rule("X4")
def test_completion_record_holds_text_outcome_evidence_order_snapshot_and_version(feed, journal, queries) -> None:
    _done(feed, sources=("src-b", "src-a", "src-c"))
    record = journal.execution("r1").record
    assert record.outcome == "answered"
    assert record.source_ids == ["src-b", "src-a", "src-c"]  # ordered items, as the runtime gave them
    assert (record.snapshot_id, record.knowledge_version) == ("snap-7", "kv-2024.09")
    assert record.answer_text.startswith("esv1.") and all(i.excerpt.startswith("esv1.") for i in record.items)
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.answer_text == ANSWER
    assert [e.source_id for e in view.evidence] == ["src-b", "src-a", "src-c"]
    assert view.evidence[0].excerpt == f"{EXCERPT} [src-b]"


@pytest.mark.rule("X4")
def test_record_is_frozen_once(feed, journal) -> None:
    _done(feed)
    first = journal.execution("r1").record
    feed(completed("r1", answer="A different answer", sources=("src-z",)))
    ex = journal.execution("r1")
    assert ex.record == first
    assert ex.refusals[-1].code == "contradictory_completion"


@pytest.mark.rule("X4")
def test_index_lookup_verifies_the_immutable_binding(feed, journal) -> None:
    _done(feed, "r1", message_id="m1")
    _done(feed, "r2", message_id="m2")
    index = journal.message_index
    assert resolve_execution(index, "conv-1", "m1", journal.execution).run_id == "r1"
    _pointing_m1_at_fails(journal, "r2", BindingMismatch)  # tampered: m1 → an execution bound to m2


@pytest.mark.rule("X4")
def test_index_pointing_into_another_conversation_is_detected(feed, journal) -> None:
    _done(feed, "r1", message_id="m1")
    _done(feed, "r9", conversation_id="conv-9", message_id="m1")
    _pointing_m1_at_fails(journal, "r9", BindingMismatch)


@pytest.mark.rule("X4")
def test_cleared_index_is_not_found_and_never_falls_back(feed, journal, queries) -> None:
    _done(feed, "r1", message_id="m1")
    _done(feed, "r2", message_id="m2")
    journal.message_index.clear("conv-1", "m2")
    with pytest.raises(ExecutionNotFound):
        resolve_execution(journal.message_index, "conv-1", "m2", journal.execution)
    history = queries.history("conv-1", ACCOUNT, {"r1": "completed", "r2": "completed"})
    items = {i.message_id: i for i in history.items}
    assert items["m2"].status == "not_found" and items["m2"].execution is None  # not "latest execution"
    assert items["m1"].status == "ok" and items["m1"].execution.run_id == "r1"


@pytest.mark.rule("X4")
def test_index_pointing_at_unknown_run_is_not_found(feed, journal) -> None:
    _done(feed, "r1", message_id="m1")
    _pointing_m1_at_fails(journal, "never-admitted", ExecutionNotFound)


@pytest.mark.rule("X4")
def test_tampered_index_surfaces_as_integrity_error_in_history(feed, journal, queries) -> None:
    _done(feed, "r1", message_id="m1")
    _done(feed, "r2", message_id="m2")
    journal.message_index.point("conv-1", "m1", "r2")
    items = {i.message_id: i for i in queries.history("conv-1", ACCOUNT).items}
    assert items["m1"].status == "integrity_error" and items["m1"].error == "binding_mismatch" and items["m1"].execution is None


@pytest.mark.rule("X4")
def test_retry_of_the_same_message_moves_the_pointer_and_both_bindings_verify(feed, journal) -> None:
    _done(feed, "r1", message_id="m1")
    _done(feed, "r1b", message_id="m1")  # same message retried as a new execution
    assert resolve_execution(journal.message_index, "conv-1", "m1", journal.execution).run_id == "r1b"
    journal.message_index.point("conv-1", "m1", "r1")  # an older execution of the same message is a legitimate binding
    assert resolve_execution(journal.message_index, "conv-1", "m1", journal.execution).run_id == "r1"
    assert journal.conversation("conv-1").message_ids() == ["m1"]


@pytest.mark.rule("X4")
def test_rebuild_message_index_from_bindings(feed, journal) -> None:
    _done(feed, "r1", message_id="m1")
    journal.message_index.drop_conversation("conv-1")
    assert journal.rebuild_message_index("conv-1") == 1
    assert journal.message_index.lookup("conv-1", "m1") == "r1"


# -- X5 ---------------------------------------------------------------------------------------------


@pytest.mark.rule("X5")
def test_public_message_matching_the_frozen_record_passes(feed, journal, queries) -> None:
    _done(feed)
    public = PublicMessage(body_sha256(ANSWER), "answered", ("src-a", "src-b"))
    view = queries.execution("r1", ACCOUNT, "completed", public_message=public)
    assert view.body_sha256 == public.body_sha256


@pytest.mark.rule("X5")
@pytest.mark.parametrize(
    ("public", "field"),
    [
        (PublicMessage(body_sha256(ANSWER + " "), "answered", ("src-a", "src-b")), "body"),
        (PublicMessage(body_sha256(ANSWER), "insufficient_evidence", ("src-a", "src-b")), "outcome"),
        (PublicMessage(body_sha256(ANSWER), "answered", ("src-b", "src-a")), "evidence_summary"),
        (PublicMessage(body_sha256(ANSWER), "answered", ("src-a",)), "evidence_summary"),
    ],
    ids=["body", "outcome", "evidence-order", "evidence-set"],
)
def test_public_message_mismatch_is_an_error_not_a_repair(feed, journal, queries, public, field) -> None:
    _done(feed)
    before = journal.execution("r1").version
    with pytest.raises(FrozenRecordMismatch) as err:
        queries.execution("r1", ACCOUNT, "completed", public_message=public)
    assert err.value.field == field
    assert journal.execution("r1").version == before  # nothing was rewritten
    item = queries.history("conv-1", ACCOUNT, {"r1": "completed"}, {"msg-r1": public}).items[0]
    assert item.status == "integrity_error" and item.error == "frozen_record_mismatch" and item.execution is None


@pytest.mark.rule("X5")
def test_history_is_a_projection_of_stored_facts_only(feed, journal, queries, monkeypatch) -> None:
    _done(feed)
    first = queries.history("conv-1", ACCOUNT, {"r1": "completed"})
    # Later facts about *other* sources, and a later run, do not change what this execution shows;
    # the projection has no retrieval or provider to call — prove no sealing (new work) happens either.
    feed(tombstoned("src-unrelated"))
    from imprint.shredding import FieldSealer

    monkeypatch.setattr(FieldSealer, "seal", lambda *a, **k: pytest.fail("history must not compute new private content"))
    monkeypatch.setattr(FieldSealer, "fingerprint", lambda *a, **k: pytest.fail("history must not recompute"))
    again = queries.history("conv-1", ACCOUNT, {"r1": "completed"})
    assert again == first


@pytest.mark.rule("X5")
def test_projection_never_infers_outcome_from_evidence(feed, journal, queries) -> None:
    _done(feed, outcome="insufficient_evidence", answer="Not enough evidence.", sources=("src-a", "src-b", "src-c"))
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.outcome == "insufficient_evidence" and view.display == "insufficient_evidence"
    _done(feed, "r2", message_id="m2", outcome="answered", sources=())
    assert queries.execution("r2", ACCOUNT, "completed").display == "answer"


# -- X6 ---------------------------------------------------------------------------------------------


@pytest.mark.rule("X6")
def test_generation_unavailable_projects_no_claims_citations_sources_or_preview(feed, journal, queries) -> None:
    _done(feed, outcome="generation_unavailable", answer="a leaked partial claim", sources=("src-a",))
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.display == "generation_unavailable" and view.outcome == "generation_unavailable"
    assert view.answer_text is None and view.evidence == [] and view.snapshot_id is None and view.knowledge_version is None
    assert view.body_sha256 is None
    # the internal record keeps the attempt's evidence identities
    assert journal.execution("r1").record.source_ids == ["src-a"]
    closed = [m for _, m in journal.announcements() if m is not None and m.type == "run.closed"][0]
    assert closed.answer_text is None and closed.evidence == [] and closed.snapshot_id is None


# -- D5 ---------------------------------------------------------------------------------------------


@pytest.mark.rule("D5")
@pytest.mark.parametrize("delivery", ["pending", "sent", "interrupted"])
def test_undelivered_completion_is_conservative_and_keeps_its_outcome(feed, journal, queries, delivery) -> None:
    _done(feed)
    view = queries.execution("r1", ACCOUNT, delivery)
    assert view.display == "delivery_unconfirmed" and view.complete is False
    assert view.outcome == "answered"  # never rewritten as insufficient_evidence
    assert view.answer_text is None and view.evidence == []
    item = queries.history("conv-1", ACCOUNT, {"r1": delivery}).items[0]
    assert item.execution.display == "delivery_unconfirmed"


@pytest.mark.rule("D5")
@pytest.mark.parametrize("delivery", sorted(DELIVERED))
def test_delivered_completion_is_shown_complete(feed, journal, queries, delivery) -> None:
    _done(feed)
    view = queries.execution("r1", ACCOUNT, delivery)
    assert view.display == "answer" and view.complete and view.answer_text == ANSWER


@pytest.mark.rule("D5")
def test_history_without_delivery_state_is_conservative(feed, journal, queries) -> None:
    _done(feed)
    assert queries.history("conv-1", ACCOUNT).items[0].execution.display == "delivery_unconfirmed"


@pytest.mark.rule("D6")
def test_other_account_gets_none(feed, journal, queries) -> None:
    _done(feed)
    assert queries.execution("r1", OTHER) is None
    assert queries.history("conv-1", OTHER) is None
    assert queries.execution("unknown", ACCOUNT) is None


@pytest.mark.rule("X2")
def test_live_and_failed_runs_show_no_answer(feed, journal, queries) -> None:
    from imprint.contracts.runtime import RunFailed

    feed(*to_running("r1"))
    assert queries.execution("r1", ACCOUNT, "completed").display == "in_progress"
    feed(RunFailed(run_id="r1", reason="model crashed"))
    view = queries.execution("r1", ACCOUNT, "completed")
    assert view.display == "failed" and view.outcome is None and view.answer_text is None and not view.complete


@pytest.mark.rule("X5")
def test_project_execution_of_unadmitted_run_is_not_found(feed, journal) -> None:
    from imprint.contracts.runtime import RunQueued

    feed(RunQueued(run_id="r0"))
    with pytest.raises(ExecutionNotFound):
        project_execution(journal.execution("r0"), journal.sealer)

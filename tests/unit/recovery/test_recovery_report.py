"""R7 (P13, P14, P15, P19): the recovery report's categories, from the log alone, and the
reconciliation facts ``--apply`` appends (``PublicationRun.Reconciled``)."""

from __future__ import annotations

import pytest
from eventsourcing.application import Application
from recovery_helpers import PUBLIC, Log, candidate, cite, registry, text_candidate

from imprint.publication import Commit, PublicationRun, SourceFacts, announce
from imprint.recovery import LogFold, answer_view, pending_reconciliations, recovery_report, view_hash


def report_of(log: Log, **inputs):
    return recovery_report(log.ledger(), **inputs)


def effects_by_call(report) -> dict:
    return {e["tool_call_id"]: e for e in report["missing_tool_receipts"]["effects"]}


@pytest.mark.rule("R7")
@pytest.mark.rule("R2")
def test_committed_blocks_and_the_unjournaled_ones_when_the_journal_is_supplied() -> None:
    log = Log()
    a = log.commit("A")
    b = log.commit("B")
    c = log.commit(f"C cites {cite(PUBLIC)}")
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    plain = report_of(log)
    assert [(x["block_id"], x["status"]) for x in plain["committed_blocks"]] == [
        (a.block_id, "live"), (b.block_id, "live"), (c.block_id, "withdrawn")]
    assert plain["committed_unjournaled"]["journal_consulted"] is False
    assert plain["committed_unjournaled"]["blocks"] is None  # not guessed
    assert "not consulted" in plain["committed_unjournaled"]["note"]
    assert all(x["journaled"] is None for x in plain["committed_blocks"])

    known = report_of(log, journaled={a.block_id})
    assert known["committed_unjournaled"]["journal_consulted"] is True
    assert [x["block_id"] for x in known["committed_unjournaled"]["blocks"]] == [b.block_id, c.block_id]


@pytest.mark.rule("R7")
@pytest.mark.rule("P19")
def test_settled_tool_effects_without_receipts() -> None:
    log = Log()
    for call in ("t-ok", "t-failed", "t-unknown", "t-missing"):
        log.settle(candidate(tool_call_id=call, markdown=f"body of {call}"))
    duplicate = log.settle(candidate(tool_call_id="t-dup", markdown="body of t-missing"))
    assert type(duplicate[0]).__name__ == "Unchanged"
    log.settle(text_candidate("entry A text is no tool effect"))
    log.settle(candidate(tool_call_id="t-rejected", markdown=""))  # settled, but no effect committed

    blind = effects_by_call(report_of(log))
    assert set(blind) == {"t-ok", "t-failed", "t-unknown", "t-missing", "t-dup"}
    assert {e["receipt"] for e in blind.values()} == {"receipt_not_known_to_publication"}
    assert blind["t-dup"]["effects"][0]["kind"] == "unchanged"

    receipts = {"t-ok": "ok", "t-failed": "failed", "t-unknown": "unknown"}
    report = report_of(log, tool_receipts=receipts)
    assert report["missing_tool_receipts"]["receipts_consulted"] is True
    assert {k: e["receipt"] for k, e in effects_by_call(report).items()} == {
        "t-failed": "failed", "t-unknown": "unknown", "t-missing": "missing", "t-dup": "missing"}
    assert all(e["confirmed_by"].startswith("candidate identity") for e in effects_by_call(report).values())


@pytest.mark.rule("R7")
@pytest.mark.rule("P15")
def test_save_failures_and_save_unknowns_are_resolved_only_by_reading_the_candidate_back() -> None:
    log = Log()
    log.run.record_save_failure("tool:lost", "integrity_error", ["blk_lost"])
    log.run.record_save_failure("tool:retried", "integrity_error")
    log.flush()
    log.settle(candidate(tool_call_id="retried", markdown="committed on the retry"))
    log.settle(candidate(tool_call_id="confirmed", markdown="committed; the confirmation was lost"))

    report = report_of(log, save_unknowns={"tool:confirmed", "tool:nowhere"})
    unresolved = {(x["fact"], x["candidate_id"]) for x in report["save_unknowns"]["unresolved"]}
    resolved = {(x["fact"], x["candidate_id"]): x for x in report["save_unknowns"]["resolved"]}
    assert unresolved == {("save_failed", "tool:lost"), ("save_unknown", "tool:nowhere")}
    assert set(resolved) == {("save_failed", "tool:retried"), ("save_unknown", "tool:confirmed")}
    assert resolved[("save_failed", "tool:retried")]["resolution"] == ["committed"]
    assert all(x["read_back"] for x in report["save_unknowns"]["unresolved"])
    # without caller input only the log's own failure facts appear
    assert {x["candidate_id"] for x in report_of(log)["save_unknowns"]["unresolved"]} == {"tool:lost"}


def previewed(log: Log, target: str, call: str, markdown: str) -> tuple[PublicationRun, object]:
    proposal = candidate(tool_call_id=call, markdown=markdown, replaces=target)
    (decision,) = log.run.prepare(proposal, registry())
    assert isinstance(decision, Commit) and decision.is_modification
    assert log.run.consume_preview_quota(proposal.candidate_id, 0, decision.block_id)
    log.flush()
    return log.run, proposal


@pytest.mark.rule("R7")
@pytest.mark.rule("P13")
@pytest.mark.rule("P14")
def test_previews_never_committed() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    b = log.commit("B")
    previewed(log, b.block_id, "p-lost", "B, previewed then lost")
    _, rejected = previewed(log, a.block_id, "p-rejected", f"A, previewed, {cite(PUBLIC)}")
    revoked = registry(SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="publisher",
                                   revoked_for_all=True))
    log.settle(rejected, revoked)  # the source was revoked between preview and commit
    _, kept = previewed(log, b.block_id, "p-kept", "B, previewed and committed")
    log.settle(kept)

    previews = report_of(log)["previews_never_committed"]["previews"]
    assert [(p["candidate_id"], p["settlement"]) for p in previews] == [
        ("tool:p-lost", None), ("tool:p-rejected", "rejected")]
    assert previews[1]["reason"] == "unauthorized_source"


@pytest.mark.rule("R7")
@pytest.mark.rule("P15")
@pytest.mark.rule("P19")
def test_apply_records_findings_only_and_is_idempotent() -> None:
    log = Log()
    a = log.commit("A")
    log.run.record_save_failure("tool:lost", "integrity_error")
    log.flush()
    _, lost = previewed(log, a.block_id, "p-lost", "A, previewed then lost")
    before_view = answer_view(log.ledger())

    report = report_of(log, journaled=set())
    findings = pending_reconciliations(report)
    assert sorted(f.kind for f in findings) == [
        "committed_unjournaled", "effect_confirmed", "preview_not_committed", "save_not_committed"]
    for f in findings:
        assert log.run.reconcile(f.kind, f.candidate_id, f.block_id, f.revision, f.detail)
    appended = log.flush()
    assert [type(e).__name__ for e in appended] == ["Reconciled"] * 4
    assert all(announce(e) is None for e in appended)  # nothing goes on the wire

    after = report_of(log, journaled=set())
    assert pending_reconciliations(after) == []
    assert len(after["reconciled"]) == 4
    assert after["previews_never_committed"]["previews"][0]["reconciled"] is True
    assert not any(log.run.reconcile(f.kind, f.candidate_id, f.block_id, f.revision) for f in findings)
    assert log.flush() == []

    # nothing changed in the answer, and no preview was promoted: the candidate is still unsettled
    assert view_hash(answer_view(log.ledger())) == view_hash(before_view)
    assert log.run.settled(lost.candidate_id) is None
    assert log.run.block(a.block_id).revision == 1  # type: ignore[union-attr]
    # only a real settlement can commit it later, as any redelivery would
    (decision,) = log.settle(lost)
    assert isinstance(decision, Commit) and decision.block.revision == 2


@pytest.mark.rule("R7")
def test_reconciliation_survives_snapshots_and_older_snapshots() -> None:
    class App(Application):
        is_snapshotting_enabled = True

    app = App(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log = Log()
    log.commit("A")
    run = log.run
    assert "reconciled" not in run.__dict__  # as a run snapshotted before this event type existed
    app.save(*log.events)
    app.take_snapshot(run.id)  # a snapshot without any reconciliation state
    loaded: PublicationRun = app.repository.get(run.id)
    assert loaded.reconciliations() == {}
    assert loaded.reconcile("save_not_committed", "tool:x", detail="read back: not in the log")
    app.save(loaded)
    app.take_snapshot(loaded.id)
    again: PublicationRun = app.repository.get(loaded.id)
    (fact,) = again.reconciliations().values()
    assert fact["kind"] == "save_not_committed" and fact["candidate_id"] == "tool:x"
    assert not again.reconcile("save_not_committed", "tool:x")


@pytest.mark.rule("R7")
@pytest.mark.rule("R4")
def test_defects_are_reported() -> None:
    log = Log()
    log.commit("A")
    fold = LogFold.of(log.events)
    fold.note_undecodable(log.run.id, 42, "MapperDeserialisationError")
    report = recovery_report(fold.runs[log.run_id])
    assert report["defects"] == [{"log_position": 42, "reason": "undecodable_event",
                                  "detail": "MapperDeserialisationError", "block_id": None}]



@pytest.mark.rule("R7")
@pytest.mark.rule("P20")
@pytest.mark.parametrize("end", ["completed", "failed"])
def test_the_report_shows_the_end_the_log_holds_and_the_view_does_not_change(end: str) -> None:
    """``Ended`` is the run's end as Publication recorded it: shown by the report, never a
    claim of success, and it changes no answer view (P20: earlier commits stay)."""
    log = Log()
    log.commit("A")
    view = answer_view(log.ledger())
    assert recovery_report(log.ledger())["log_lifecycle"] == {"ended": None, "lapsed": None,
                                                              "conversation_deleted": None}
    log.run.end(end)
    log.flush()
    ended = log.ledger()
    assert recovery_report(ended)["log_lifecycle"]["ended"] == end
    assert view_hash(answer_view(ended)) == view_hash(view)

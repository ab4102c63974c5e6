"""Recovery reads every event: each event class an aggregate under ``libs/imprint`` can store
has its row in recovery's tables, found by walking the package (:mod:`tests.support.versions`),
never from a hand list.

Which store holds which aggregate is the package it is written in: ``imprint.publication``'s
aggregates are the Publication log, which the ledger folds (R1: the views and recovery state
are rebuilt from it alone) — :data:`~imprint.recovery.ledger.LEDGER` for the run's own events,
:data:`~imprint.recovery.ledger.OUTSIDE_RUNS` for the registry's, the shards' reliance records'
and the conversations'. ``imprint.journal``'s aggregates are the runtime journal's store, which
the timeline and the report compare with the log (R7, R2, R5) —
:data:`~imprint.recovery.journal_facts.JOURNAL_FACTS` for a run's execution,
:data:`~imprint.recovery.journal_facts.NOT_COMPARED` for the rest. An aggregate anywhere else
fails: recovery would not know which log holds it."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.utils import resolve_topic
from recovery_helpers import PUBLIC, Log, candidate, cite

from imprint.journal.execution import AnswerExecution, AnswerExecutionRequest, CompletionRecord
from imprint.journal.lifecycle import State
from imprint.publication.run import PublicationRun
from imprint.recovery import LogFold, answer_view, verify_ledger
from imprint.recovery.journal_facts import JOURNAL_FACTS, NOT_COMPARED, ExecutionFold
from imprint.recovery.ledger import LEDGER, OUTSIDE_RUNS
from tests.support.versions import aggregates, name_of, stored_events

GOLDEN_LOGS = Path(__file__).resolve().parents[2] / "golden" / "logs"
STORE_OF_PACKAGE = {"imprint.publication": "publication", "imprint.journal": "journal"}
"""The store each package's aggregates are written to (the part of the same name owns it)."""


def store_of(aggregate: type) -> str | None:
    return next((store for package, store in STORE_OF_PACKAGE.items()
                 if aggregate.__module__.startswith(package + ".")), None)


def stored_in(store: str) -> dict[type, type]:
    """Every event class the aggregates of ``store`` can write → its aggregate."""
    return {event: aggregate for aggregate in aggregates() if store_of(aggregate) == store
            for event in stored_events(aggregate)}


def test_every_aggregate_is_in_a_store_recovery_knows() -> None:
    placed = {name_of(a): store_of(a) for a in aggregates()}
    assert None not in placed.values(), f"an aggregate recovery does not know the store of: {placed}"
    assert {"publication", "journal"} == set(placed.values())


@pytest.mark.rule("R1")
def test_every_event_the_publication_log_stores_has_its_ledger_row() -> None:
    stored = stored_in("publication")
    runs = {e for e, a in stored.items() if a is PublicationRun}
    assert len(runs) == 17 and len(stored) > len(runs), "the walk finds the run's events and the others'"
    missing = sorted(name_of(e) for e in runs if e not in LEDGER)
    assert missing == [], f"PublicationRun events the ledger has no row for: {missing}"
    elsewhere = sorted(name_of(e) for e, a in stored.items() if a is not PublicationRun and e not in OUTSIDE_RUNS)
    assert elsewhere == [], f"Publication log events with no row in OUTSIDE_RUNS: {elsewhere}"
    assert set(LEDGER) == runs and set(OUTSIDE_RUNS) == set(stored) - runs, "no row for a class nothing stores"
    assert all(reason.strip() for reason in OUTSIDE_RUNS.values()), "every row says why"


@pytest.mark.rule("R7")
def test_every_event_the_journal_stores_has_its_timeline_row() -> None:
    stored = stored_in("journal")
    missing = sorted(name_of(e) for e in stored if e not in JOURNAL_FACTS and e not in NOT_COMPARED)
    assert missing == [], f"journal events the timeline has no row for: {missing}"
    assert not set(JOURNAL_FACTS) & set(NOT_COMPARED), "one row per type"
    assert set(JOURNAL_FACTS) | set(NOT_COMPARED) == set(stored), "no row for a class nothing stores"
    assert all(stored[e] is AnswerExecution for e in JOURNAL_FACTS), "the timeline compares one run's execution"
    assert all(reason.strip() for reason in NOT_COMPARED.values()), "every row says why"


@pytest.mark.rule("R8")
@pytest.mark.rule("R1")
@pytest.mark.parametrize("release", sorted(p.name for p in GOLDEN_LOGS.iterdir() if p.is_dir()))
def test_every_event_type_a_golden_log_holds_has_its_row(release: str) -> None:
    """The event types an earlier release wrote (its MANIFEST) are read by this code's tables,
    each through the table of the store it was written to."""
    held = json.loads((GOLDEN_LOGS / release / "MANIFEST.json").read_text())["event_types"]
    tables: dict[str, set[type]] = {"publication": set(LEDGER) | set(OUTSIDE_RUNS),
                                    "journal": set(JOURNAL_FACTS) | set(NOT_COMPARED)}
    unread = {store: sorted(topic for topic in topics if resolve_topic(topic) not in tables[store])
              for store, topics in held.items()}
    assert unread == {store: [] for store in held}


@pytest.mark.rule("R1")
@pytest.mark.rule("R4")
def test_an_event_type_without_a_row_is_a_defect_not_a_silent_skip() -> None:
    log = Log()
    log.commit("A")
    fold = log.fold()
    view = answer_view(fold.runs[log.run_id])

    class Unheard:  # what a newer release might store
        originator_id = log.run.id
        originator_version = 99

    fold.apply(Unheard())
    ledger = fold.runs[log.run_id]
    assert [d.reason for d in ledger.defects] == ["unknown_event_type"]
    assert not verify_ledger(ledger).ok
    assert answer_view(ledger)["blocks"] == view["blocks"], "the blocks stay served (R4: withheld alone)"
    stray = LogFold()
    stray.apply(Unheard())
    assert [d.reason for d in stray.orphans] == ["unknown_event_type"]


@pytest.mark.rule("R1")
def test_a_run_that_stores_every_event_type_folds_without_a_defect() -> None:
    """A run driven through every command its aggregate has: every event type it stores is
    folded through its row, and the audit trail carries what each one said."""
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.commit(f"A again cites {cite(PUBLIC)}", replaces=a.block_id)
    log.settle(candidate(markdown=""))  # rejected
    log.settle(candidate(markdown="x", replaces="blk_" + "f" * 32))  # revision rejected
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.run.record_save_failure("tool:call-x", "database unavailable", [])
    log.run.lose("runtime_lost")
    log.run.delete_conversation("user_request")
    log.flush()
    ledger = log.ledger()
    assert ledger.defects == []
    assert "note" not in {key for entry in ledger.trail for key in entry}
    assert ledger.lifecycle() == {"ended": "failed", "lapsed": "runtime_lost", "conversation_deleted": "user_request"}
    assert ledger.source_changes == {PUBLIC: {"tombstoned": False, "revoked_for_all": True, "revoked_accounts": []}}
    kinds = {entry["type"] for entry in ledger.trail}
    assert {"SourceStandingChanged", "ConversationDeleted", "Ended", "LeaseLapsed"} <= kinds


def _request(run_id: str) -> AnswerExecutionRequest:
    # sealed fields are opaque strings to the aggregate; recovery never reads them
    return AnswerExecutionRequest(run_id=run_id, account_id="acct-1", conversation_id="conv-1", message_id="msg-1",
                                  question="esv1.q", normalized_question="esv1.n", qcs_id="qcs-1",
                                  inherits_from=None, conditions="esv1.c", condition_count=0, condition_sources={},
                                  admission_event_id="ev-admit", requested_at="2026-01-01T10:00:00+00:00")


def _as_the_aggregate_holds_it(x: AnswerExecution) -> dict[str, Any]:
    return {
        "found": True, "state": x.state.value if x.state else None, "outcome": x.outcome, "erased": x.erased,
        "transitions": [{"state": t.state.value, "at": t.at.isoformat(), "reason": t.reason} for t in x.transitions],
        "effects": [{"kind": e.kind, "candidate_id": e.candidate_id, "block_id": e.block_id, "revision": e.revision,
                     "body_sha256": e.body_sha256, "receipt_id": e.receipt_id, "log_position": e.log_position,
                     "at": e.at.isoformat()} for e in x.effects],
        "receipts": [{"tool_call_id": r.tool_call_id, "status": r.status, "at": r.at.isoformat()} for r in x.receipts],
        "refusals": [{"message_type": r.message_type, "code": r.code, "detail": r.detail, "at": r.at.isoformat()}
                     for r in x.refusals],
        "lapsed": x.lapsed,
        "stop_requested": x.stop_requested_at.isoformat() if x.stop_requested_at else None,
        "interrupted_by": x.interrupted_by,
        "steered": list(x.steered),
        "unread": [],
    }


@pytest.mark.rule("R7")
@pytest.mark.rule("X2")
@pytest.mark.parametrize("ending", ["lapsed_then_erased", "completed", "steered_then_interrupted"])
def test_the_journal_fold_agrees_with_the_execution_it_reads(ending: str) -> None:
    """The timeline's journal facts, folded from the execution's stored events through their
    rows, are what the execution itself holds after the same events."""
    x = AnswerExecution("run-j")
    x.admit("ev-admit", _request("run-j"))
    x.transition("ev-q", "run.queued", State.QUEUED)
    x.transition("ev-r", "run.started", State.RUNNING)
    x.transition("ev-q2", "run.queued", State.QUEUED)  # illegal after running: refused, recorded
    x.report_stage("ev-stage", "searching", None)
    x.grant("ev-grant", "src:1", "public", "publisher", None)
    x.record_receipt("ev-receipt", "call-1", "ok")
    x.observe_effect("ev-effect", "published", "tool:call-1", "blk_1", 1, "0" * 64, "rcpt-1", 7)
    if ending == "steered_then_interrupted":  # X12: newer questions of the conversation
        x.steer("ev-steer", "run-k", "msg-k", "esv1.k")
        x.interrupt("ev-interrupt", "run-l")
        x.transition("ev-stopped", "run.stopped", State.STOPPED)
    else:
        x.request_stop("ev-stop", "acct-1")
    if ending == "completed":
        x.complete("ev-done", CompletionRecord("answered", "esv1.a", (), None, None, "fp", "ev-done"))
    elif ending == "lapsed_then_erased":
        x.lapse("ev-lapse", "runtime_lost", 30.0)
        x.erase("ev-erase", "user_request")
    events = x.collect_events()
    assert {type(e) for e in events} - set(JOURNAL_FACTS) - set(NOT_COMPARED) == set()
    folded = ExecutionFold.of("run-j", events).to_json()
    assert folded == {"run_id": "run-j", **_as_the_aggregate_holds_it(x)}
    assert folded["refusals"] and folded["receipts"] and folded["effects"] and folded["stop_requested"]
    assert ExecutionFold.of("run-j", []).found is False


@pytest.mark.rule("R7")
def test_a_journal_event_type_without_a_row_is_listed_not_skipped() -> None:
    class Unheard:
        timestamp = datetime(2026, 1, 1, tzinfo=timezone.utc)

    assert ExecutionFold.of("run-j", [Unheard()]).unread == ("test_a_journal_event_type_without_a_row_is_listed_not_"
                                                             "skipped.<locals>.Unheard",)

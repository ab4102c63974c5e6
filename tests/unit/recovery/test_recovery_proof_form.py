"""R4, R1: the form a commit proof covers is the form the full examination serves, and a
view's hash composed from its proven blocks is the hash of the view. Built from real
``PublicationRun`` events (no keys: the MAC itself is checked by the integration tier)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import TypeAdapter
from recovery_helpers import PUBLIC, Log, cite, num, ref

from imprint.canonical import canonical_bytes
from imprint.publication import PublicationRun
from imprint.contracts.publication import CommittedBlock
from imprint.publication.proof import Proven, iso_time, json_time, proof_subject, served_form
from imprint.recovery import Defect, LogFold, answer_view, hashed_answer_view, view_hash
from imprint.recovery.integrity import served

pytestmark = [pytest.mark.rule("R4"), pytest.mark.rule("R1")]

TIMES = [datetime(2026, 12, 4, 7, 30, 0, tzinfo=timezone.utc),
         datetime(2026, 12, 4, 7, 30, 1, 5, tzinfo=timezone.utc),
         datetime(2026, 12, 4, 7, 30, 2, 999999, tzinfo=timezone(timedelta(hours=2))),
         datetime(2026, 12, 4, 7, 30, 1, 500000, tzinfo=timezone.utc),  # a second already spelled
         datetime(2026, 12, 4, 7, 30, 1, 500000, tzinfo=timezone(timedelta(0))),  # UTC, not the utc singleton
         datetime(999, 1, 2, 3, 4, 5, 60, tzinfo=timezone.utc)]


@pytest.mark.parametrize("moment", TIMES)
def test_a_time_reads_as_pydantics_json_writes_it(moment: datetime) -> None:
    assert json_time(moment) == TypeAdapter(datetime).dump_python(moment, mode="json")
    assert iso_time(json_time(moment)) == moment.isoformat()


def log_of_three() -> Log:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)} — “quoted” ✓")
    log.commit(f"B weighs {num()}")
    log.commit(f"C builds on {ref(a.block.block_id)}")
    return log


def at(event: PublicationRun.Event, moment: datetime) -> PublicationRun.Event:
    """The event as if committed at ``moment``."""
    moved = object.__new__(type(event))
    object.__setattr__(moved, "__dict__", {**vars(event), "timestamp": moment})
    return moved


@pytest.mark.parametrize("moment", TIMES)
def test_the_proven_form_of_a_commit_is_what_the_full_examination_serves(moment: datetime) -> None:
    log = log_of_three()
    events = [at(e, moment) if isinstance(e, PublicationRun.BlockRevisionCommitted) else e for e in log.events]
    ledger = LogFold.of(events).ledger(log.run_id)
    assert ledger is not None
    commits = [e for e in events if isinstance(e, PublicationRun.BlockRevisionCommitted)]
    revisions = [r for h in ledger.blocks.values() for r in h.revisions]
    assert len(commits) == len(revisions) == 3
    for event, revision in zip(commits, revisions):
        assert served_form(event) == served(revision)[1]
    assert all(served_form(e) is None for e in events if not isinstance(e, PublicationRun.BlockRevisionCommitted))


@pytest.mark.parametrize("moment", TIMES)
def test_a_fold_of_proven_commits_keeps_what_a_fold_of_examined_ones_keeps(moment: datetime) -> None:
    """The fold reads a proven commit's time from its served form: the same receipt and the
    same audit trail as a fold that formats the event's own time."""
    events = [at(e, moment) for e in log_of_three().events]
    examined, proven = LogFold(), LogFold()
    for event in events:
        seal = "opened" if isinstance(event, PublicationRun.BlockRevisionCommitted) else None
        form = served_form(event)
        examined.apply(event, seal)
        proven.apply(event, seal, Proven(form, canonical_bytes(form)) if form is not None else None)
    run_id = events[0].run_id
    a, b = examined.ledger(run_id), proven.ledger(run_id)
    assert a is not None and b is not None and a.trail == b.trail and a.settlements == b.settlements
    assert [r.receipt for h in a.blocks.values() for r in h.revisions] == \
        [r.receipt for h in b.blocks.values() for r in h.revisions]
    assert a.trail[-1]["at"] == moment.isoformat()


def test_a_view_hash_composed_from_proven_blocks_is_the_views_hash() -> None:
    log = log_of_three()
    commits = {e.block["block_id"]: e for e in log.events if isinstance(e, PublicationRun.BlockRevisionCommitted)}
    fold = LogFold()
    first = next(iter(commits))
    for event in log.events:  # one block proven, the others examined in full
        form = served_form(event) if getattr(event, "block", {}).get("block_id") == first else None
        fold.apply(event, "opened" if isinstance(event, PublicationRun.BlockRevisionCommitted) else None,
                   Proven(form, canonical_bytes(form)) if form is not None else None)
    ledger = fold.ledger(log.run_id)
    assert ledger is not None
    ledger.defects.append(Defect(99, "undecodable_event", "a record beside the blocks"))
    view, sha = hashed_answer_view(ledger)
    assert view == answer_view(ledger) and sha == view_hash(view)
    assert len(view["blocks"]) == 3 and len(view["withheld"]) == 1
    assert sum(r.proven is not None for h in ledger.blocks.values() for r in h.revisions) == 1


def test_a_served_form_holds_no_float_so_its_canonical_json_is_orjsons_as_written() -> None:
    """``proof_subject`` skips the search for floats orjson writes unlike the standard library
    (``imprint.canonical``): right only while no field of ``CommittedBlock`` is a number."""
    def types(node: object) -> set[str]:
        if isinstance(node, dict):
            own = {node["type"]} if isinstance(node.get("type"), str) else set()
            return own.union(*(types(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(types(v) for v in node))
        return set()

    assert "number" not in types(CommittedBlock.model_json_schema(mode="serialization"))
    log = log_of_three()
    for event in log.events:
        form = served_form(event)
        if form is not None:
            assert proof_subject(form) == canonical_bytes(form)

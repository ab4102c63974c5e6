"""R1 answer views and their stable hash; R2/R5 no journal input; R4 one defect withheld
alone; R6 no numeric re-render. Built from real ``PublicationRun`` events."""

from __future__ import annotations

import copy
import json

import pytest
from eventsourcing.application import Application
from recovery_helpers import HANDLE, PUBLIC, Log, candidate, cite, num, ref, tampered, text_candidate, without

from imprint.contracts.publication import Receipt
from imprint.publication import PublicationRun
from imprint.recovery import LogFold, answer_view, answer_views, canonical_json, replay, view_hash


def live_blocks(run: PublicationRun) -> list[tuple]:  # type: ignore[type-arg]
    """What the aggregate keeps of each live block (its body and view stay in the commit event)."""
    return [(r.block_id, r.revision, r.ordinal, r.candidate_id, r.body_sha256, r.source_hint, list(r.depends_on),
             Receipt.model_validate(r.receipt).model_dump(mode="json")) for r in run.live_blocks()]


def kept_of(blocks: list[dict]) -> list[tuple]:  # type: ignore[type-arg]
    return [(b["block_id"], b["revision"], b["delivery_ordinal"], b["candidate_id"], b["body_sha256"],
             b["source_hint"], b["depends_on"], b["receipt"]) for b in blocks]


def three_blocks(log: Log) -> tuple[str, str, str]:
    a = log.commit(f"A cites {cite(PUBLIC)}")
    b = log.commit(f"B weighs {num()}")
    c = log.commit(f"C builds on {ref(a.block_id)}")
    return a.block_id, b.block_id, c.block_id


def three_block_log() -> tuple[Log, list, tuple[str, str, str]]:  # type: ignore[type-arg]
    """A log of three committed blocks, its events as a list to tamper with, and the blocks' ids."""
    log = Log()
    ids = three_blocks(log)
    return log, list(log.events), ids


def commit_of(events: list, block_id: str) -> int:  # type: ignore[type-arg]
    """Where the log commits ``block_id`` (each block of these logs has one revision)."""
    return next(i for i, e in enumerate(events)
                if isinstance(e, PublicationRun.BlockRevisionCommitted) and e.block["block_id"] == block_id)


@pytest.mark.rule("R1")
def test_replaying_the_same_log_twice_yields_the_same_view_and_hash() -> None:
    log = Log()
    three_blocks(log)
    first = replay(log.events)
    second = replay(copy.deepcopy(log.events))
    assert first == second
    (view, digest), = first.values()
    assert digest == view_hash(view) and len(digest) == 64
    assert digest == view_hash(json.loads(canonical_json(view)))  # key order and whitespace do not matter


@pytest.mark.rule("R1")
def test_the_view_is_live_blocks_in_delivery_order_at_their_current_revision() -> None:
    log = Log()
    a, b, c = three_blocks(log)
    log.settle(candidate(markdown=f"A, revised, cites {cite(PUBLIC)}", replaces=a))
    view = answer_view(log.ledger())
    assert [(x["block_id"], x["revision"], x["delivery_ordinal"]) for x in view["blocks"]] == [
        (a, 2, 1), (b, 1, 2), (c, 1, 3)]
    first = view["blocks"][0]
    assert first["content"]["markdown"].startswith("A, revised") and first["source_hint"] == "sources_verified"
    assert first["truncated"] is False and len(first["body_sha256"]) == 64
    assert first["receipt"]["log_position"] == log.run.blocks[a]["receipt"]["log_position"]
    assert kept_of(view["blocks"]) == live_blocks(log.run)  # the same blocks the aggregate holds as live
    assert view["withheld"] == []


@pytest.mark.rule("R1")
def test_a_replay_through_a_stored_log_equals_the_in_memory_one() -> None:
    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    log = Log()
    three_blocks(log)
    log.settle(text_candidate("plain text, entry A"))
    app.save(*log.events)  # the events as committed, then decoded back from the recorder
    notifications = app.recorder.select_notifications(start=1, limit=1000)
    decoded = [app.mapper.to_domain_event(n) for n in notifications]
    assert replay(decoded) == replay(log.events)


@pytest.mark.rule("R1")
@pytest.mark.rule("P21")
def test_withdrawn_blocks_are_omitted_and_the_hash_moves() -> None:
    log = Log()
    a, b, c = three_blocks(log)
    before = replay(log.events)[log.run_id][1]
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    view, after = replay(log.events)[log.run_id]
    assert after != before
    assert [x["block_id"] for x in view["blocks"]] == []  # A cites it, B's number and C's ref rely on it
    log2 = Log()
    own = log2.commit("stands alone")
    log2.commit(f"cites {cite(PUBLIC)}")
    log2.run.withdraw_for_source(PUBLIC, "source_revoked")
    log2.flush()
    assert [x["block_id"] for x in answer_view(log2.ledger())["blocks"]] == [own.block_id]


@pytest.mark.rule("R6")
def test_history_keeps_the_numbers_rendered_at_commit_time() -> None:
    log = Log()
    b = log.commit(f"weight {num()}")
    before = replay(log.events)[log.run_id]
    log.run.issue_numeric(HANDLE, "99.9", "%", 2, PUBLIC)  # today's value differs
    log.flush()
    after = replay(log.events)[log.run_id]
    assert after == before  # a new numeric authority changes neither the view nor its hash
    (block,) = after[0]["blocks"]
    assert block["block_id"] == b.block_id
    assert block["content"]["markdown"] == "weight 12.5 %"
    assert block["numbers"] == [{"handle_id": HANDLE, "rendered": "12.5 %", "version": 1}]
    assert "99.9" not in canonical_json(after[0])


@pytest.mark.rule("R2")
@pytest.mark.rule("R5")
def test_the_view_is_built_from_the_publication_log_alone() -> None:
    """A block Publication committed is in the view; nothing about a journal is asked."""
    log = Log()
    a, b, c = three_blocks(log)
    view = answer_view(log.ledger())
    assert {x["block_id"] for x in view["blocks"]} == {a, b, c}
    import inspect

    assert list(inspect.signature(answer_view).parameters) == ["ledger"]


@pytest.mark.rule("R4")
def test_one_corrupt_body_is_withheld_alone() -> None:
    log, events, (a, b, c) = three_block_log()
    index = commit_of(events, b)
    original = events[index].block["content"]
    events[index] = tampered(events[index], content={"type": original["type"], "markdown": "B weighs 13 %"})
    view = answer_view(LogFold.of(events).runs[log.run_id])
    assert [x["block_id"] for x in view["blocks"]] == [a, c]
    assert view["withheld"] == [{"block_id": b, "revision": 1, "delivery_ordinal": 2, "reason": "corrupt_body"}]
    assert "13 %" not in canonical_json(view)


@pytest.mark.rule("R4")
def test_a_missing_authorization_proof_is_withheld_alone() -> None:
    log, events, (a, b, c) = three_block_log()
    events[commit_of(events, a)] = without(events[commit_of(events, a)], "receipt_id")
    events[commit_of(events, c)] = tampered(events[commit_of(events, c)], role=None, smuggled="x")  # no block record
    view = answer_view(LogFold.of(events).runs[log.run_id])
    assert [x["block_id"] for x in view["blocks"]] == [b]
    assert [(w["block_id"], w["reason"]) for w in view["withheld"]] == [(a, "proof_missing"), (c, "malformed_record")]


@pytest.mark.rule("R4")
def test_a_receipt_that_binds_another_revision_is_no_proof() -> None:
    log, events, (a, b, _) = three_block_log()
    clone = copy.deepcopy(events[commit_of(events, a)])
    clone.__dict__["receipt_id"] = log.run.blocks[b]["receipt"]["receipt_id"]
    events[commit_of(events, a)] = clone
    view = answer_view(LogFold.of(events).runs[log.run_id])
    assert ("proof_missing", a) in {(w["reason"], w["block_id"]) for w in view["withheld"]}
    assert a not in {x["block_id"] for x in view["blocks"]}


@pytest.mark.rule("R4")
@pytest.mark.rule("R1")
def test_an_unreadable_record_never_sinks_the_replay() -> None:
    log, events, (a, b, c) = three_block_log()
    index = commit_of(events, c)
    events[index] = tampered(events[index], block_id=None)  # cannot even be placed
    fold = LogFold.of(events)
    fold.note_undecodable(log.run.id, 999, "MapperDeserialisationError")
    view = answer_view(fold.runs[log.run_id])
    assert [x["block_id"] for x in view["blocks"]] == [a, b]
    assert sorted(w["reason"] for w in view["withheld"]) == ["malformed_record", "undecodable_event"]
    assert replay(events) == replay(copy.deepcopy(events))


@pytest.mark.rule("P10")
def test_a_legacy_record_without_a_hint_reads_as_unknown_not_clean() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    events = [tampered(e, source_hint=None) if isinstance(e, PublicationRun.BlockRevisionCommitted) else e
              for e in log.events]
    (block,) = answer_view(LogFold.of(events).runs[log.run_id])["blocks"]
    assert block["block_id"] == a.block_id and block["source_hint"] == "unknown"


@pytest.mark.rule("R1")
def test_runs_are_folded_apart_and_other_aggregates_are_ignored() -> None:
    from imprint.publication import SourceRecord

    one, two = Log("run-one"), Log("run-two")
    x = one.commit("one's block")
    y = two.commit("two's block")
    record = SourceRecord(PUBLIC)
    record.register("public", "publisher")
    interleaved = [*one.events[:3], *record.collect_events(), *two.events, *one.events[3:]]
    views = {r: v for r, (v, _) in replay(interleaved).items()}
    assert [b["block_id"] for b in views["run-one"]["blocks"]] == [x.block_id]
    assert [b["block_id"] for b in views["run-two"]["blocks"]] == [y.block_id]
    assert replay(interleaved, "run-two") == {"run-two": replay(two.events)["run-two"]}


@pytest.mark.rule("R1")
@pytest.mark.rule("R4")
def test_a_fold_for_views_only_gives_every_view_and_hash_of_the_full_fold_and_keeps_no_audit() -> None:
    """``imprint replay`` folds without the audit trail and settlements (a view reads
    neither): revisions, withdrawals, ordinals and defects must all still be folded."""
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    b, c, d = (log.commit(f"{name} stands alone") for name in "BCD")
    log.settle(candidate(markdown="B, revised", replaces=b.block_id))
    log.run.withdraw_for_source(PUBLIC)  # withdraws A
    log.flush()
    events = list(log.events)
    events[commit_of(events, c.block_id)] = tampered(events[commit_of(events, c.block_id)], body_sha256="0" * 64)
    events[commit_of(events, d.block_id)] = tampered(events[commit_of(events, d.block_id)], block_id=None)
    full = LogFold.of(events)
    lean = LogFold(audit=False)
    for event in events:
        lean.apply(event)
    views = answer_views(full)
    assert answer_views(lean) == views
    assert {r: view_hash(v) for r, v in answer_views(lean).items()} == {r: view_hash(v) for r, v in views.items()}
    view = views[log.run_id]
    assert [(x["block_id"], x["revision"]) for x in view["blocks"]] == [(b.block_id, 2)]
    assert sorted(w["reason"] for w in view["withheld"]) == ["corrupt_body", "malformed_record"]
    ledger, kept = lean.ledger(log.run_id), full.ledger(log.run_id)
    assert ledger is not None and kept is not None
    assert ledger.trail == [] and ledger.settlements == {}
    assert kept.trail and kept.settlements

"""R4 (P10, P11, P18, X8): ``imprint replay --verify``'s integrity verdict of a run — every
committed revision, every seal, every hint binding — naming each failing block."""

from __future__ import annotations

from typing import Any

import pytest
from recovery_helpers import Log, candidate, tampered

from imprint.publication import PublicationRun
from imprint.publication.run import receipt_id_for
from imprint.recovery import LogFold, answer_view, verify_ledger


def commits(events: list[Any]) -> list[int]:
    return [i for i, e in enumerate(events) if isinstance(e, PublicationRun.BlockRevisionCommitted)]


def verdict_of(events: list[Any], seals: dict[int, str] | None = None):
    fold = LogFold()
    for i, event in enumerate(events):
        fold.apply(event, (seals or {}).get(i))
    (ledger,) = fold.runs.values()
    return verify_ledger(ledger), ledger


def reasons(verdict) -> list[tuple[str | None, int | None, str]]:
    return [(f.block_id, f.revision, f.reason) for f in verdict.failures]


@pytest.mark.rule("R4")
def test_a_sound_log_verifies_every_revision() -> None:
    log = Log()
    a = log.commit("A")
    log.commit("A, revised", replaces=a.block_id)
    log.commit("B")
    verdict, _ = verdict_of(log.events)
    assert verdict.ok and verdict.failures == []
    assert (verdict.blocks, verdict.blocks_verified, verdict.revisions) == (2, 2, 3)


@pytest.mark.rule("R4")
def test_a_damaged_old_revision_fails_verification_though_the_view_serves_the_current_one() -> None:
    log = Log()
    a = log.commit("A")
    log.commit("A, revised", replaces=a.block_id)
    b = log.commit("B")
    events = list(log.events)
    first = commits(events)[0]
    events[first] = tampered(events[first], content={"type": "text", "markdown": "A, rewritten"})
    verdict, ledger = verdict_of(events)
    assert reasons(verdict) == [(a.block_id, 1, "corrupt_body")]
    assert verdict.failures[0].run_id == log.run_id and "hashes to" in verdict.failures[0].detail
    assert "rewritten" not in verdict.failures[0].detail  # ids and hashes, never body text
    assert verdict.blocks_verified == 1 and not verdict.ok
    assert [x["block_id"] for x in answer_view(ledger)["blocks"]] == [a.block_id, b.block_id]


@pytest.mark.rule("R4")
@pytest.mark.rule("P10")
@pytest.mark.rule("P18")
def test_a_record_moved_to_another_revision_fails_its_sequence_and_its_hint_binding() -> None:
    log = Log()
    a = log.commit("A")
    events = list(log.events)
    index = commits(events)[0]
    moved = tampered(events[index], revision=2, source_hint="sources_verified")
    moved.__dict__["receipt_id"] = receipt_id_for(a.block_id, 2)  # a receipt consistent with the forgery
    events[index] = moved
    verdict, _ = verdict_of(events)
    assert {r for _, _, r in reasons(verdict)} == {"revision_out_of_sequence", "hint_unbound"}


@pytest.mark.rule("P10")
def test_a_legacy_record_without_a_hint_is_noted_as_unknown_not_as_broken() -> None:
    log = Log()
    log.commit("A")
    events = [tampered(e, source_hint=None) if isinstance(e, PublicationRun.BlockRevisionCommitted) else e
              for e in log.events]
    verdict, _ = verdict_of(events)
    assert verdict.ok and verdict.hints_unknown == 1


@pytest.mark.rule("R4")
def test_seals_that_do_not_open_fail_and_shredded_bodies_are_counted_not_failed() -> None:
    """X8: a deleted conversation's bodies are gone by design; a seal that should open and does not is damage."""
    log = Log()
    a = log.commit("A")
    b = log.commit("B")
    c = log.commit("C")
    events = list(log.events)
    ia, ib, ic = commits(events)
    events[ib] = tampered(events[ib], content={"type": "text", "markdown": "⟨unreadable⟩"})
    events[ic] = tampered(events[ic], content={"type": "text", "markdown": "⟨removed⟩"})
    verdict, ledger = verdict_of(events, {ia: "opened", ib: "unopenable", ic: "shredded"})
    assert reasons(verdict) == [(b.block_id, 1, "seal_unopenable")]
    assert (verdict.seals_opened, verdict.shredded) == (1, 1)
    view = answer_view(ledger)
    assert [x["block_id"] for x in view["blocks"]] == [a.block_id]
    assert [(w["block_id"], w["reason"]) for w in view["withheld"]] == [(b.block_id, "seal_unopenable"),
                                                                        (c.block_id, "shredded")]


@pytest.mark.rule("R4")
@pytest.mark.rule("P11")
def test_an_unchanged_settlement_must_name_a_committed_revision_by_its_receipt() -> None:
    log = Log()
    log.settle(candidate(tool_call_id="first", markdown="same body"))
    decisions = log.settle(candidate(tool_call_id="again", markdown="same body"))
    assert type(decisions[0]).__name__ == "Unchanged"
    events = list(log.events)
    index = next(i for i, e in enumerate(events) if isinstance(e, PublicationRun.CandidateUnchanged))
    sound, _ = verdict_of(events)
    assert sound.ok
    events[index].__dict__["receipt"] = {**events[index].receipt, "receipt_id": "rcpt-forged"}
    verdict, _ = verdict_of(events)
    assert [r for _, _, r in reasons(verdict)] == ["unbound_receipt"]


@pytest.mark.rule("R4")
def test_an_unreadable_record_is_a_failure_of_its_run() -> None:
    log = Log()
    log.commit("A")
    events = list(log.events)
    index = commits(events)[0]
    events[index] = tampered(events[index], block_id=None)
    verdict, _ = verdict_of(events)
    assert [r for _, _, r in reasons(verdict)] == ["malformed_record"]

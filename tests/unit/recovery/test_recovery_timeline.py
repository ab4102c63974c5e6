"""The run inspector's timeline (SPEC §1's five facts, R2, R5, D4): per block revision,
each fact from its own source, and every disagreement between the sources marked."""

from __future__ import annotations

import pytest
from recovery_helpers import Log

from imprint.recovery import JournalRun, Observation, SentFrame, timeline


def effect(block_id: str, revision: int = 1, sha: str | None = None, at: str = "2026-01-01T10:00:02+00:00") -> dict:
    return {"kind": "published", "candidate_id": "c", "block_id": block_id, "revision": revision,
            "body_sha256": sha, "receipt_id": "r", "log_position": 1, "at": at}


def rows_by_block(document: dict) -> dict[str, dict]:
    return {b["block_id"]: b["revisions"][-1] for b in document["blocks"]}


@pytest.mark.rule("R2")
@pytest.mark.rule("R5")
def test_the_crash_window_shows_as_committed_not_journaled_and_the_block_stays() -> None:
    log = Log()
    a, b = log.commit("A"), log.commit("B")
    journal = JournalRun(log.run_id, found=True, state="running", effects=(effect(b.block_id),),
                         transitions=({"state": "admitted", "at": "2026-01-01T10:00:00+00:00", "reason": None},))
    document = timeline(log.run_id, log.ledger(), journal=journal)
    rows = rows_by_block(document)
    assert rows[a.block_id]["marks"] == ["committed_not_journaled"] and rows[a.block_id]["journaled"] == []
    assert rows[b.block_id]["marks"] == [] and rows[b.block_id]["journaled"][0]["kind"] == "published"
    assert [d["kind"] for d in document["disagreements"]] == ["committed_not_journaled"]
    assert rows[a.block_id]["committed"]["receipt_id"] and rows[a.block_id]["committed"]["integrity"] == "ok"
    assert document["lifecycle"]["transitions"][0]["state"] == "admitted"

    unknown = timeline(log.run_id, log.ledger(), journal=None, journal_note="store unavailable")
    assert unknown["disagreements"] == []  # an unread journal is unknown, not a disagreement
    assert all(r["journaled"] is None for r in rows_by_block(unknown).values())
    assert unknown["lifecycle"]["available"] is False and unknown["lifecycle"]["note"] == "store unavailable"


@pytest.mark.rule("R2")
def test_journal_facts_the_log_does_not_hold_and_other_hashes_are_marked() -> None:
    log = Log()
    a = log.commit("A")
    journal = JournalRun(log.run_id, found=True,
                         effects=(effect(a.block_id, sha="0" * 64), effect("blk_elsewhere", 1)))
    document = timeline(log.run_id, log.ledger(), journal=journal)
    assert {(d["kind"], d["block_id"]) for d in document["disagreements"]} == {
        ("journal_hash_differs", a.block_id), ("journaled_not_committed", "blk_elsewhere")}


@pytest.mark.rule("D4")
def test_sent_received_and_rendered_are_separate_facts_each_with_its_own_time() -> None:
    log = Log()
    a, b = log.commit("A"), log.commit("B")
    frames = [SentFrame(1, "run-status", None, None), SentFrame(2, "answer-publication", a.block_id, 1, "saved"),
              SentFrame(3, "answer-publication", b.block_id, 1, "saved"),
              SentFrame(4, "answer-publication", "blk_ghost", 1, "saved")]
    seen = [Observation("answer.part", "2026-01-01T09:59:59+00:00", candidate_id=a.block.candidate_id),
            Observation("answer.preview", "2026-01-01T10:00:00+00:00", block_id=a.block_id, revision=1),
            Observation("delivery.sent", "2026-01-01T10:00:03+00:00", last_event_id=2),
            Observation("client.received", "2026-01-01T10:00:04+00:00", last_event_id=3, block_ids=(a.block_id,)),
            Observation("client.rendered", "2026-01-01T10:00:05+00:00", last_event_id=3, block_ids=(b.block_id,))]
    document = timeline(log.run_id, log.ledger(), journal=None, frames=frames, observations=seen)
    rows = rows_by_block(document)
    ra, rb = rows[a.block_id], rows[b.block_id]
    assert ra["proposed"]["at"].startswith("2026-01-01T09:59:59") and ra["previewed"]["at"].endswith("10:00:00+00:00")
    assert ra["sent"] == {"frame_ids": [2], "at": "2026-01-01T10:00:03+00:00"}
    assert ra["received"]["at"].endswith("10:00:04+00:00") and ra["rendered"] is None  # received is not rendered
    assert rb["sent"] == {"frame_ids": [3], "at": None}  # written by Delivery, no delivery observation covers it
    assert rb["received"] is None and rb["rendered"]["at"].endswith("10:00:05+00:00")
    assert rb["marks"] == ["rendered_not_received"]
    assert rb["previewed"] is None and rb["proposed"]["at"] is None  # not observed: not invented
    assert ("sent_not_committed", "blk_ghost") in {(d["kind"], d["block_id"]) for d in document["disagreements"]}


@pytest.mark.rule("R4")
def test_a_withdrawn_block_and_a_rejected_candidate_keep_their_own_facts() -> None:
    from recovery_helpers import PUBLIC, candidate, cite

    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.settle(candidate(tool_call_id="empty", markdown=""))
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    document = timeline(log.run_id, log.ledger(), journal=None)
    (block,) = document["blocks"]
    assert block["status"] == "withdrawn" and block["revisions"][0]["withdrawn"]["cause"] == "source_revoked"
    assert block["revisions"][0]["committed"]["receipt_id"]  # the commit stays a fact (P21)
    assert [(x["candidate_id"], x["outcome"], x["reason"]) for x in document["not_committed"]] == [
        ("tool:empty", "rejected", "empty_body")]
    assert a.block_id == block["block_id"]



@pytest.mark.rule("D4")
def test_each_announced_type_is_read_through_its_row_and_lands_in_its_own_stage() -> None:
    """The inspector's announced types are one table: what stage each shows and what is kept
    of it (ids, positions, times — never text); the reader asks Kafka for exactly those types
    (``services.recovery.inspection.INSPECT_TYPES`` is :data:`STAGE_OF`'s keys)."""
    from imprint.contracts.delivery import ClientReceived, ClientRendered, DeliverySent
    from imprint.contracts.runtime import AnswerText, ModelReasoning
    from imprint.recovery.timeline import OBSERVED, STAGE_OF, STAGES, observations_of

    assert set(STAGE_OF.values()) == {"proposed", "previewed", "sent", "received", "rendered"} <= set(STAGES)
    assert len(STAGE_OF) == len(OBSERVED), "one message type per row"
    log = Log()
    a = log.commit("Rayleigh scattering")
    messages = [AnswerText(run_id=log.run_id, turn_id="turn-1", segment=0, text="Rayleigh scattering"),
                ModelReasoning(run_id=log.run_id, text="never a proposal"),
                DeliverySent(run_id=log.run_id, account_id="acct-1", connection_id="c1", last_event_id=2),
                ClientReceived(run_id=log.run_id, account_id="acct-1", last_event_id=2, block_ids=[a.block_id]),
                ClientRendered(run_id=log.run_id, account_id="acct-1", last_event_id=2, block_ids=[a.block_id])]
    seen = observations_of(messages)
    assert [o.type for o in seen] == ["answer.text", "delivery.sent", "client.received", "client.rendered"]
    assert "Rayleigh" not in repr(seen) and seen[0].candidate_id, "the candidate's identity, never its text"
    document = timeline(log.run_id, log.ledger(), journal=None,
                        frames=[SentFrame(2, "answer-publication", a.block_id, 1, "saved")],
                        observations=[*seen, Observation("delivery.unheard_of", "2026-01-01T10:00:00+00:00")])
    row = rows_by_block(document)[a.block_id]
    assert row["sent"]["at"] and row["received"]["at"] and row["rendered"]["at"] and row["marks"] == []
    assert document["sources"]["observations_unplaced"] == ["delivery.unheard_of"], "listed, not dropped"

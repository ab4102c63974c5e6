"""P21: withdrawn blocks stay auditable; the export is the run's whole committed history."""

from __future__ import annotations

import pytest
from recovery_helpers import PUBLIC, Log, candidate, cite, tampered

from imprint.contracts.runtime import ModelReasoning
from imprint.publication import IntakeRefusal, PublicationRun, intake
from imprint.recovery import LogFold, export_history


@pytest.mark.rule("P21")
def test_a_withdrawn_block_keeps_every_committed_revision_in_the_export() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.settle(candidate(markdown=f"A, second revision, {cite(PUBLIC)}", replaces=a.block_id))
    b = log.commit("B stands alone")
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()

    export = export_history(log.ledger())
    blocks = {x["block_id"]: x for x in export["blocks"]}
    withdrawn = blocks[a.block_id]
    assert withdrawn["status"] == "withdrawn"
    assert withdrawn["withdrawn"]["cause"] == "source_revoked" and withdrawn["withdrawn"]["source_id"] == PUBLIC
    assert [r["revision"] for r in withdrawn["revisions"]] == [1, 2]
    assert withdrawn["revisions"][0]["block"]["content"]["markdown"].startswith("A cites")
    assert withdrawn["revisions"][1]["replaces"] == a.block_id and withdrawn["revisions"][1]["is_modification"]
    assert all(r["integrity"] == "ok" and r["receipt"]["receipt_id"] for r in withdrawn["revisions"])
    assert blocks[b.block_id]["status"] == "live"
    assert [x["block_id"] for x in export["blocks"]] == [a.block_id, b.block_id]  # delivery order


@pytest.mark.rule("P21")
@pytest.mark.rule("P2")
@pytest.mark.rule("P12")
def test_the_trail_keeps_rejections_refusals_and_withdrawals_in_log_order() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.settle(candidate(markdown=""))  # rejected: empty_body
    log.settle(candidate(markdown="x", replaces="blk_" + "f" * 32))  # revision_rejected: invalid_target
    refusal = intake(ModelReasoning(run_id=log.run_id, text="hidden"))
    assert isinstance(refusal, IntakeRefusal)
    log.run.refuse_candidate(refusal)
    log.run.withdraw_for_source(PUBLIC, "source_tombstoned")
    log.flush()

    trail = export_history(log.ledger())["trail"]
    kinds = [e["type"] for e in trail]
    assert kinds[:1] == ["Opened"]
    assert kinds[-6:] == ["BlockRevisionCommitted", "BlockRejected", "RevisionRejected", "CandidateRefused",
                          "SourceStandingChanged", "BlockWithdrawn"]
    assert trail[-5]["reason"] == "empty_body" and trail[-4]["reason"] == "invalid_target"
    assert trail[-3]["reason"] == "not_an_answer"
    assert trail[-1]["block_id"] == a.block_id and trail[-1]["cause"] == "source_tombstoned"
    positions = [e["log_position"] for e in trail]
    assert positions == sorted(positions) == list(range(1, len(trail) + 1))


@pytest.mark.rule("P21")
@pytest.mark.rule("X8")
def test_a_deleted_conversation_keeps_identities_not_bodies() -> None:
    log = Log()
    a = log.commit("private answer text")
    log.run.withdraw_all("conversation_deleted")
    log.flush()
    (block,) = export_history(log.ledger())["blocks"]
    (revision,) = block["revisions"]
    assert block["block_id"] == a.block_id and block["status"] == "withdrawn"
    assert revision["block"]["content"] is None and revision["redacted"] == "conversation_deleted"
    assert revision["block"]["body_sha256"] == a.block.body_sha256


@pytest.mark.rule("P21")
@pytest.mark.rule("R4")
def test_the_export_flags_a_tampered_revision() -> None:
    log = Log()
    a = log.commit("A")
    events = [tampered(e, content={"type": "text", "markdown": "A!"})
              if isinstance(e, PublicationRun.BlockRevisionCommitted) else e for e in log.events]
    (block,) = export_history(LogFold.of(events).runs[log.run_id])["blocks"]
    assert block["block_id"] == a.block_id and block["revisions"][0]["integrity"] == "corrupt_body"


@pytest.mark.rule("X8")
@pytest.mark.rule("P21")
def test_a_deleted_conversation_redacts_every_body_of_the_run_whatever_withdrew_it_first() -> None:
    """``ConversationDeleted`` is the run's own fact: a block a revocation withdrew before the
    deletion keeps its identity and hash in the export, not its text."""
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    before = export_history(log.ledger())
    assert before["blocks"][0]["revisions"][0]["block"]["content"] is not None
    assert before["log_lifecycle"]["conversation_deleted"] is None
    log.run.delete_conversation("user_request")
    log.flush()
    export = export_history(log.ledger())
    (block,) = export["blocks"]
    assert block["withdrawn"]["cause"] == "source_revoked", "the first withdrawal stays what it was"
    assert block["revisions"][0]["block"]["content"] is None
    assert block["revisions"][0]["redacted"] == "conversation_deleted"
    assert block["revisions"][0]["block"]["body_sha256"] == a.block.body_sha256
    assert export["log_lifecycle"]["conversation_deleted"] == "user_request"
    assert export["trail"][-1] == {**export["trail"][-1], "type": "ConversationDeleted", "reason": "user_request"}

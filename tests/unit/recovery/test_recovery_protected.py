"""R3–R6: the protected read of one block by run, block and receipt, re-checked under
current authorization (account, sources through ``SourceRecord``, inherited dependencies)."""

from __future__ import annotations

import pytest
from recovery_helpers import (
    ACCOUNT,
    HANDLE,
    OTHER,
    PRIVATE_OWN,
    PUBLIC,
    Log,
    candidate,
    cite,
    num,
    ref,
    sources,
    tampered,
)

from imprint.publication import PublicationRun
from imprint.recovery import LogFold, RunLedger, read_protected, sources_to_confirm


def receipt(log: Log, block_id: str) -> str:
    return log.run.blocks[block_id]["receipt"]["receipt_id"]


def read(ledger: RunLedger | None, block_id: str, receipt_id: str, account: str | None = ACCOUNT, *changes):
    return read_protected(ledger, block_id, receipt_id, account_id=account, standing=sources(*changes))


@pytest.mark.rule("R3")
def test_a_block_is_served_by_run_block_and_receipt_to_its_account() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)} and {cite(PRIVATE_OWN)}")
    result = read(log.ledger(), a.block_id, receipt(log, a.block_id))
    assert result.served and result.reason is None and result.current is True
    assert result.block is not None and result.block["content"]["markdown"] == a.block.content.markdown
    assert result.block["receipt"]["receipt_id"] == receipt(log, a.block_id)


@pytest.mark.rule("R3")
def test_what_cannot_be_located_or_bound_is_withheld() -> None:
    log = Log()
    a = log.commit("A")
    ledger = log.ledger()
    assert read(None, a.block_id, receipt(log, a.block_id)).reason == "not_found"
    assert read(ledger, "blk_" + "0" * 32, receipt(log, a.block_id)).reason == "not_found"
    assert read(ledger, a.block_id, "9d2c4b6a-0000-5000-8000-000000000000").reason == "receipt_mismatch"


@pytest.mark.rule("R3")
def test_the_account_is_rechecked() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    result = read(log.ledger(), a.block_id, receipt(log, a.block_id), OTHER)
    assert not result.served and result.reason == "account_mismatch" and result.block is None
    unbound = Log(account=None)  # no admission recorded: the account cannot be confirmed
    b = unbound.commit("B")
    assert read(unbound.ledger(), b.block_id, receipt(unbound, b.block_id)).reason == "account_unconfirmed"


@pytest.mark.rule("R3")
@pytest.mark.parametrize("change", ["revoke", f"revoke:{ACCOUNT}", "tombstone"])
def test_a_source_no_longer_standing_withholds_even_if_the_log_never_withdrew(change: str) -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    safe = log.commit("B stands alone")
    ledger = log.ledger()
    result = read(ledger, a.block_id, receipt(log, a.block_id), ACCOUNT, (PUBLIC, change))
    assert not result.served and result.reason == "source_unauthorized" and result.block is None
    assert read(ledger, safe.block_id, receipt(log, safe.block_id), ACCOUNT, (PUBLIC, change)).served


@pytest.mark.rule("R3")
def test_a_revocation_for_another_account_does_not_withhold() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    assert read(log.ledger(), a.block_id, receipt(log, a.block_id), ACCOUNT, (PUBLIC, f"revoke:{OTHER}")).served


@pytest.mark.rule("R3")
def test_a_numeric_source_is_an_inherited_authorization() -> None:
    log = Log()
    b = log.commit(f"weight {num()}")
    assert read(log.ledger(), b.block_id, receipt(log, b.block_id)).served
    assert read(log.ledger(), b.block_id, receipt(log, b.block_id), ACCOUNT, (PUBLIC, "tombstone")).reason == \
        "source_unauthorized"


@pytest.mark.rule("R3")
def test_inherited_dependencies_are_rechecked_transitively() -> None:
    log = Log()
    a = log.commit("A has no sources")
    b = log.commit(f"B builds on {ref(a.block_id)}")
    c = log.commit("C summarises B", depends_on=[b.block_id])
    assert read(log.ledger(), c.block_id, receipt(log, c.block_id)).served
    # A is revised to stand on PUBLIC; C's own record predates that, its dependency chain does not
    log.settle(candidate(markdown=f"A now cites {cite(PUBLIC)}", replaces=a.block_id))
    ledger = log.ledger()
    assert read(ledger, c.block_id, receipt(log, c.block_id)).served
    withheld = read(ledger, c.block_id, receipt(log, c.block_id), ACCOUNT, (PUBLIC, "revoke"))
    assert withheld.reason == "dependency_unauthorized" and PUBLIC in withheld.detail
    # a dependency withdrawn on its own (a real BlockWithdrawn of the run, A only)
    log.run.trigger_event(PublicationRun.BlockWithdrawn, run_id=log.run_id, block_id=a.block_id, revision=2,
                          cause="source_revoked", source_id=PUBLIC)
    log.flush()
    assert read(log.ledger(), c.block_id, receipt(log, c.block_id)).reason == "dependency_withdrawn"
    assert PUBLIC in sources_to_confirm(log.ledger(), c.block_id)


@pytest.mark.rule("R3")
@pytest.mark.rule("P21")
def test_a_withdrawn_block_is_not_served_for_current_display() -> None:
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    result = read(log.ledger(), a.block_id, receipt(log, a.block_id))
    assert result.reason == "withdrawn" and result.block is None


@pytest.mark.rule("R3")
def test_unknown_effective_sources_cannot_be_confirmed() -> None:
    log = Log()
    a = log.commit("A (a legacy record: its sources were never recorded)")
    events = [tampered(e, effective_sources=None) if isinstance(e, PublicationRun.BlockRevisionCommitted) else e
              for e in log.events]
    result = read(LogFold.of(events).runs[log.run_id], a.block_id, receipt(log, a.block_id))
    assert result.reason == "authorization_unconfirmed" and result.block is None


@pytest.mark.rule("R4")
def test_a_corrupt_block_is_withheld_alone_and_taints_its_dependents_only() -> None:
    log = Log()
    a = log.commit("A")
    b = log.commit(f"B builds on {ref(a.block_id)}")
    c = log.commit("C stands alone")
    events = [tampered(e, content={"type": "text", "markdown": "A, altered"})
              if isinstance(e, PublicationRun.BlockRevisionCommitted) and e.block["block_id"] == a.block_id else e
              for e in log.events]
    ledger = LogFold.of(events).runs[log.run_id]
    assert read(ledger, a.block_id, receipt(log, a.block_id)).reason == "corrupt_body"
    assert read(ledger, b.block_id, receipt(log, b.block_id)).reason == "dependency_unconfirmed"
    assert read(ledger, c.block_id, receipt(log, c.block_id)).served


@pytest.mark.rule("R6")
def test_history_is_served_as_rendered_at_commit_never_with_todays_numbers() -> None:
    log = Log()
    first = log.commit(f"weight {num()}")
    log.run.issue_numeric(HANDLE, "99.9", "%", 2, PUBLIC)
    log.flush()
    second = log.settle(candidate(markdown=f"weight now {num()}", replaces=first.block_id))[0]
    ledger = log.ledger()
    history = ledger.blocks[first.block_id]
    old = read(ledger, first.block_id, history.revisions[0].receipt_id)
    new = read(ledger, first.block_id, history.revisions[1].receipt_id)
    assert old.served and old.current is False and new.served and new.current is True
    assert old.block["content"]["markdown"] == "weight 12.5 %"
    assert old.block["numbers"] == [{"handle_id": HANDLE, "rendered": "12.5 %", "version": 1}]
    assert new.block["content"]["markdown"] == "weight now 99.9 %" == second.block.content.markdown


@pytest.mark.rule("R5")
def test_no_journal_detail_is_needed_to_serve_a_committed_body() -> None:
    """The read takes no journal input at all: missing journal detail cannot reject it."""
    import inspect

    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    assert read(log.ledger(), a.block_id, receipt(log, a.block_id)).served
    parameters = set(inspect.signature(read_protected).parameters)
    assert not any("journal" in name or "receipt_status" in name for name in parameters)


@pytest.mark.rule("R3")
@pytest.mark.rule("R6")
@pytest.mark.rule("P21")
def test_a_revocation_the_run_noted_withholds_history_even_under_an_older_registry_copy() -> None:
    """``SourceStandingChanged``: the run's own log holds the revocation. An earlier revision
    read by its receipt (R6) that stood on the source is withheld although the registry standing
    handed in is older and does not show it; the current revision, which no longer stands on
    it, is still served."""
    log = Log()
    a = log.commit(f"A cites {cite(PUBLIC)}")
    first = receipt(log, a.block_id)
    log.commit("A, rewritten without the source", replaces=a.block_id)
    log.run.withdraw_for_source(PUBLIC, "source_revoked")
    log.flush()
    ledger = log.ledger()
    assert ledger.blocks[a.block_id].live, "the current revision does not stand on the source"
    old = read(ledger, a.block_id, first)  # the registry copy handed in: no revocation
    assert not old.served and old.reason == "source_unauthorized" and old.current is False
    assert read(ledger, a.block_id, receipt(log, a.block_id)).served
    unnoted = LogFold.of([e for e in log.events if not isinstance(e, PublicationRun.SourceStandingChanged)])
    assert read(unnoted.ledger(log.run_id), a.block_id, first).served, "without the run's note: the registry decides"

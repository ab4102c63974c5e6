"""The source registry aggregate and its standing (inputs to P7, P8, P21)."""

from __future__ import annotations

import pytest
from pub_helpers import ACCOUNT, OTHER

from imprint.publication import SourceRecord, standing_of


@pytest.mark.rule("P8")
@pytest.mark.rule("P21")
def test_registry_facts_become_standing() -> None:
    record = SourceRecord(source_id="src:1")
    assert record.id == SourceRecord.id_for("src:1")
    assert record.register("private", ACCOUNT, "Memo")
    assert not record.register("private", ACCOUNT, "Memo")
    facts = record.standing()
    assert facts.registered and facts.scope == "private" and facts.owner_account_id == ACCOUNT
    assert not facts.revoked_for(ACCOUNT)
    assert record.revoke(OTHER, "shared by mistake")
    assert not record.revoke(OTHER)
    assert record.standing().revoked_for(OTHER) and not record.standing().revoked_for(ACCOUNT)
    assert record.standing().revoked_for(None)
    assert record.revoke(None, "withdrawn")
    assert record.standing().revoked_for(ACCOUNT)
    assert record.tombstone() and not record.tombstone()
    assert record.standing().tombstoned
    assert standing_of([record]).get("src:1") == record.standing()


@pytest.mark.rule("P21")
def test_reliance_lists_the_runs_to_visit_once() -> None:
    record = SourceRecord(source_id="src:2")
    assert record.record_reliance("run-1") and record.record_reliance("run-2")
    assert not record.record_reliance("run-1")
    assert record.dependents == ["run-1", "run-2"]
    names = [type(e).__name__ for e in record.collect_events()]
    assert names == ["Created", "RelianceRecorded", "RelianceRecorded"]

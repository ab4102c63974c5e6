"""R8, the log outlives the code: each upcast step turns what an older release stored into
what this one reads — one pure case per step (:data:`STEPS`): a state as version *n*
stored it, upcast, is the state version *n+1* writes; and every step any stored class
implies has its case here. (Through the real mapper and snapshots:
``tests/component/publication/test_pub_upcasting.py``.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from imprint.journal.leases import LeaseShard
from imprint.publication.conversations import ConversationRuns
from imprint.publication.run import PublicationRun
from imprint.publication.sources import SourceDependents, SourceRecord
from tests.support.versions import aggregates, name_of, stored_event_classes, upcast_steps

pytestmark = pytest.mark.rule("R8")

AT = {"_type_": "datetime_iso", "_data_": "2026-12-03T09:00:03+00:00"}
NOTED = {"tombstoned": False, "revoked_for_all": False, "revoked_accounts": []}

STEPS: dict[tuple[type, int], tuple[dict[str, Any], dict[str, Any]]] = {
    (LeaseShard.Started, 1): (
        {"timestamp": AT, "originator_topic": "imprint.journal.leases:LeaseLane", "lane": 3},
        {"timestamp": AT, "originator_topic": "imprint.journal.leases:LeaseLane", "shard": 3},
    ),
    (LeaseShard, 1): (
        {"_created_on": AT, "_modified_on": AT, "lane": 3, "runs": {"run-1": None}},
        {"_created_on": AT, "_modified_on": AT, "shard": 3, "runs": {"run-1": None}},
    ),
    (SourceRecord.ShardOpened, 1): (
        {"timestamp": AT, "lane": "0"},
        {"timestamp": AT, "shard": "0"},
    ),
    (SourceDependents.Created, 1): (
        {"timestamp": AT, "originator_topic": "imprint.publication.sources:SourceDependents",
         "source_id": "src:public:annual-report-2024", "lane": "3"},
        {"timestamp": AT, "originator_topic": "imprint.publication.sources:SourceDependents",
         "source_id": "src:public:annual-report-2024", "shard": "3"},
    ),
    (SourceDependents, 1): (
        {"_created_on": AT, "_modified_on": AT, "source_id": "src-a", "lane": "3", "dependents": ["run-1"],
         "noted": NOTED},
        {"_created_on": AT, "_modified_on": AT, "source_id": "src-a", "shard": "3", "dependents": ["run-1"],
         "noted": NOTED},
    ),
    (SourceRecord, 1): (
        {"_created_on": AT, "_modified_on": AT, "source_id": "src-a", "registered": True, "scope": "public",
         "owner_account_id": "pub", "title": "", "revoked_for_all": False, "revoked_accounts": [],
         "tombstoned": False, "dependents": [], "lanes": ["0", "3"]},
        {"_created_on": AT, "_modified_on": AT, "source_id": "src-a", "registered": True, "scope": "public",
         "owner_account_id": "pub", "title": "", "revoked_for_all": False, "revoked_accounts": [],
         "tombstoned": False, "dependents": [], "shards": ["0", "3"]},
    ),
    (PublicationRun, 1): (
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {"blk_1": {
            "block_id": "blk_1", "revision": 1, "ordinal": 1, "candidate_id": "tool:c", "fingerprint": "f",
            "body_sha256": "h", "source_hint": "sources_verified", "effective_sources": ["src-a"], "depends_on": [],
            "labels": [], "view": {"block_id": "blk_1", "content": {"type": "text", "markdown": "body"}},
            "receipt": {"receipt_id": "r", "log_position": 3, "committed_at": "2026-12-03T09:00:03+00:00"},
            "withdrawn": None}}},
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {"blk_1": {
            "block_id": "blk_1", "revision": 1, "ordinal": 1, "candidate_id": "tool:c", "fingerprint": "f",
            "body_sha256": "h", "source_hint": "sources_verified", "effective_sources": ["src-a"],
            "receipt": {"receipt_id": "r", "log_position": 3, "committed_at": "2026-12-03T09:00:03+00:00"},
            "withdrawn": None}}, "ended": None},
    ),
    (PublicationRun, 2): (
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {}, "ended": None},
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {}, "ended": None,
         "conversation_deleted": False, "lapsed": None},
    ),
    (PublicationRun, 3): (
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {}, "conversation_id": "conv-1"},
        {"_created_on": AT, "_modified_on": AT, "run_id": "run-1", "blocks": {}, "conversation_id": "conv-1",
         "read_with": [ConversationRuns.id_for("conv-1")]},
    ),
}
"""``(class, n)`` → (the state version *n* stored, the state version *n+1* reads)."""


@pytest.mark.parametrize(("cls", "n"), sorted(STEPS, key=lambda step: (name_of(step[0]), step[1])),
                         ids=lambda value: name_of(value) if isinstance(value, type) else f"v{value}")
def test_an_upcast_step_turns_the_older_state_into_the_newer(cls: type, n: int) -> None:
    older, newer = STEPS[cls, n]
    state = copy.deepcopy(older)
    getattr(cls, f"upcast_v{n}_v{n + 1}")(state)
    assert state == newer


def test_every_upcast_step_has_its_case_here() -> None:
    steps = {step for c in [*aggregates(), *stored_event_classes()] for step in upcast_steps(c)}
    missing = sorted(f"{name_of(c)} v{n}->v{n + 1}" for c, n in steps - STEPS.keys())
    assert missing == [], "add a case to STEPS for each"
    assert STEPS.keys() <= steps, "a case for a step no class takes"


def test_a_run_snapshot_that_knew_its_end_keeps_it() -> None:
    older = {**copy.deepcopy(STEPS[PublicationRun, 1][0]), "ended": "completed"}
    PublicationRun.upcast_v1_v2(older)
    assert older["ended"] == "completed"


def test_a_run_snapshot_that_knew_its_deletion_and_lapse_keeps_them() -> None:
    older = {**copy.deepcopy(STEPS[PublicationRun, 2][0]), "conversation_deleted": True, "lapsed": "lease_expired"}
    PublicationRun.upcast_v2_v3(older)
    assert older["conversation_deleted"] is True and older["lapsed"] == "lease_expired"


def test_a_run_snapshot_never_admitted_reads_nothing_with_it() -> None:
    older = {**copy.deepcopy(STEPS[PublicationRun, 3][0]), "conversation_id": None}
    PublicationRun.upcast_v3_v4(older)
    assert older["read_with"] == []


def test_a_snapshot_older_than_the_lanes_upcasts_to_no_shard() -> None:
    older = {key: value for key, value in STEPS[SourceRecord, 1][0].items() if key != "lanes"}
    SourceRecord.upcast_v1_v2(older)
    assert older["shards"] == []

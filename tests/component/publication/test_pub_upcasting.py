"""R8, the log outlives the code, through the Publication log's own mapper (the sealing
mapper over the library's, with the application's transcoder):

* events exactly as release ``2026-12-03-v1`` stored them (bytes copied from its golden
  log) read as this release's events, and a snapshot of that release's shape restores this
  release's aggregate; what this release writes is at its class's version;
* an event already at its class's version is read without calling any upcaster (the
  library runs them only for older versions; decoding is on the replay and relay paths).

The pure upcast steps: ``tests/unit/publication/test_pub_upcasters.py``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import StoredEvent

from imprint.publication.sources import SourceDependents, SourceRecord
from imprint.shredding import InMemoryKeyring
from services.publication.application import PublicationLog
from tests.support.backends import memory_environment

pytestmark = pytest.mark.rule("R8")

NOTED = {"tombstoned": False, "revoked_for_all": False, "revoked_accounts": []}


def publication_log() -> PublicationLog:
    return PublicationLog(InMemoryKeyring(), env=memory_environment("publication"))


RECORD_ID = uuid.UUID("aab32ad3-c4c9-5dbb-aba9-d45ebfa6df2e")
DEPENDENTS_ID = uuid.UUID("c16bc5e8-5778-55ec-a090-2c7c813671d5")
RELEASE_2026_12_03 = {
    "record": [
        StoredEvent(RECORD_ID, 1, "imprint.publication.sources:SourceRecord.Created",
                    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-03T09:00:01+00:00"},'
                    b'"originator_topic":"imprint.publication.sources:SourceRecord",'
                    b'"source_id":"src:public:annual-report-2024"}'),
        StoredEvent(RECORD_ID, 2, "imprint.publication.sources:SourceRecord.LaneOpened",
                    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-03T09:00:03+00:00"},"lane":"0"}'),
    ],
    "dependents": [
        StoredEvent(DEPENDENTS_ID, 1, "imprint.publication.sources:SourceDependents.Created",
                    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-03T09:00:03+00:00"},'
                    b'"originator_topic":"imprint.publication.sources:SourceDependents",'
                    b'"source_id":"src:public:annual-report-2024","lane":"0"}'),
    ],
}
"""Stored events of release 2026-12-03-v1, byte for byte from its golden log (the record's
``LaneOpened`` was its version 3 there; the versions here are consecutive)."""


def test_events_an_earlier_release_stored_read_as_this_release_s_events() -> None:
    log = publication_log()
    try:
        record = None
        for event in map(log.mapper.to_domain_event, RELEASE_2026_12_03["record"]):
            record = event.mutate(record)
        assert isinstance(record, SourceRecord) and record.shards == ["0"]
        assert record.id == SourceRecord.id_for("src:public:annual-report-2024")

        (created,) = map(log.mapper.to_domain_event, RELEASE_2026_12_03["dependents"])
        assert type(created) is SourceDependents.Created and created.shard == "0"  # type: ignore[attr-defined]
        dependents = created.mutate(None)
        assert isinstance(dependents, SourceDependents) and dependents.shard == "0"
        assert dependents.id == SourceDependents.id_for("src:public:annual-report-2024", "0") == DEPENDENTS_ID, \
            "the id an old log wrote is the id this release looks for"
    finally:
        log.close()


def test_a_new_event_is_stored_at_its_class_version_under_its_new_name() -> None:
    log = publication_log()
    try:
        record = SourceRecord("src-new")
        record.open_shard("5")
        dependents = SourceDependents("src-new", "5")
        stored = {s.topic: s for s in map(log.mapper.to_stored_event, [*record.collect_events(),
                                                                        *dependents.collect_events()])}
        opened = stored["imprint.publication.sources:SourceRecord.ShardOpened"]
        assert b'"shard":"5"' in opened.state and b'"class_version":2' in opened.state and b"lane" not in opened.state
        created = stored["imprint.publication.sources:SourceDependents.Created"]
        assert b'"shard":"5"' in created.state and b'"class_version":2' in created.state
        assert log.mapper.to_domain_event(opened).shard == "5"  # type: ignore[attr-defined]
    finally:
        log.close()


def test_a_snapshot_an_earlier_release_took_restores_this_release_s_aggregate() -> None:
    at = datetime(2026, 12, 3, 9, tzinfo=UTC)
    older = {"_created_on": at, "_modified_on": at, "source_id": "src-a", "lane": "3", "dependents": ["run-1"],
             "noted": dict(NOTED)}  # as release 2026-12-03-v1 snapshotted a SourceDependents
    snapshot = Snapshot(originator_id=DEPENDENTS_ID, originator_version=200, timestamp=datetime.now(UTC),
                        topic="imprint.publication.sources:SourceDependents", state=older)
    log = publication_log()
    try:
        restored = log.snapshots.mapper.to_domain_event(log.snapshots.mapper.to_stored_event(snapshot))  # type: ignore[union-attr]
        dependents = restored.mutate(None)
    finally:
        log.close()
    assert isinstance(dependents, SourceDependents)
    assert (dependents.shard, dependents.dependents, dependents.version) == ("3", ["run-1"], 200)
    assert "lane" not in vars(dependents)
    taken = Snapshot.take(dependents)
    assert taken.state["class_version"] == 2 and taken.state["shard"] == "3"


def test_an_event_at_its_class_version_is_read_without_an_upcaster(monkeypatch: pytest.MonkeyPatch) -> None:
    log = publication_log()
    try:
        record = SourceRecord("src-current")
        record.open_shard("1")
        current = [log.mapper.to_stored_event(e) for e in record.collect_events()]
        called: list[str] = []

        def refuse(state: dict[str, Any]) -> None:
            called.append(state.get("lane", "?"))
            raise AssertionError("an upcaster ran on an event at its class's version")

        monkeypatch.setattr(SourceRecord.ShardOpened, "upcast_v1_v2", staticmethod(refuse))
        assert [type(log.mapper.to_domain_event(s)).__name__ for s in current] == ["Created", "ShardOpened"]
        assert called == []
        with pytest.raises(AssertionError):
            log.mapper.to_domain_event(RELEASE_2026_12_03["record"][1])
        assert called == ["0"], "an older event does go through it"
    finally:
        log.close()


"""P13 + P14 + P15: a modification is previewed, then its commit fails for real in the
store. In-process (the real ``PublicationLog`` fed from the real topics), so the
failure lands exactly between the preview and the tracked commit:

* a concurrent writer commits to the same run between the preview and the commit →
  PostgreSQL's unique constraint refuses ours (``IntegrityError``);
* the tracking table loses its INSERT privilege → PostgreSQL refuses the tracked
  transaction only (the quota flush, which has no tracking record, still works).

Either way: the preview was on ``imprint.publication.v1``, ``answer.save_failed``
followed, the quota the preview consumed stays in the log, nothing is announced as
published until a retry really commits, and the retry commits exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, PersistenceError
from psycopg import sql

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun
from imprint.recovery.integrity import body_sha256
from services.common.settings import Settings
from services.publication.application import open_log
from tests.integration.publication.pubsupport import (
    Driver,
    admitted,
    dedupe,
    of_type,
    part,
    published,
    read_run,
)
from tests.support.kafka import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def topic_of_run(settings: Settings, run: str, until) -> list[dict]:  # type: ignore[no-untyped-def]
    values = asyncio.run(read_topic(settings, Topic.PUBLICATION, until=lambda vs: until([v for v in vs if v["run_id"] == run])))
    return [v for v in values if v["run_id"] == run]


def first_block(driver: Driver, run: str) -> str:
    driver.feed(admitted(run), part(run, "s-original", "Original body."))
    driver.relay()
    (record,) = driver.run(run).live_blocks()
    return record.block_id


def assert_failed_but_quota_kept(settings: Settings, run: str, block_id: str, error: str) -> None:
    logged = read_run(settings, run)
    assert logged.settled("tool:s-revised") is None, "not committed"
    assert logged.save_failures == {"tool:s-revised": error}, "a failure fact"
    record = logged.block(block_id)
    assert record is not None and record.revision == 1 and record.body_sha256 == body_sha256("Original body.")
    assert logged.consumed == {"tool:s-revised#0": block_id}, "the previewed modification has used quota"
    assert logged.block_modifications == {block_id: 1} and logged.run_modifications == 1



def assert_preview_then_failure_and_no_promotion(settings: Settings, driver: Driver, run: str, block_id: str) -> None:
    driver.relay()  # everything committed so far is announced
    values = topic_of_run(settings, run, lambda vs: any(v["type"] == "answer.save_failed" for v in vs))
    kinds = [v["type"] for v in values if v["type"] in ("answer.preview", "answer.save_failed")]
    revised_preview = dedupe([v for v in values if v["type"] == "answer.preview" and v["block"]["revision"] == 2])
    assert len(revised_preview) == 1 and revised_preview[0]["block"]["content"]["markdown"] == "Revised body."
    assert "receipt" not in revised_preview[0]["block"], "a preview is never presented as saved"
    assert kinds.index("answer.save_failed") > kinds.index("answer.preview", kinds.index("answer.preview") + 1), \
        "save_failed follows the revision's preview"
    assert {v["candidate_id"] for v in of_type(values, "answer.save_failed")} == {"tool:s-revised"}
    assert [v["block"]["revision"] for v in dedupe(published(values))] == [1], "the preview was not promoted"


def assert_retry_commits_once(settings: Settings, driver: Driver, run: str, block_id: str) -> None:
    driver.relay()
    values = topic_of_run(settings, run, lambda vs: any(
        v["type"] == "answer.published" and v["block"]["revision"] == 2 for v in vs))
    revisions = [(v["block"]["block_id"], v["block"]["revision"]) for v in dedupe(published(values))]
    assert revisions == [(block_id, 1), (block_id, 2)]
    logged = read_run(settings, run)
    record = logged.block(block_id)
    assert record is not None and record.revision == 2 and record.body_sha256 == body_sha256("Revised body.")
    assert logged.block_modifications == {block_id: 1} and logged.run_modifications == 1, "quota counted once"
    outcome = logged.settled("tool:s-revised")
    assert outcome is not None and [b.kind for b in outcome.blocks] == ["committed"]


@pytest.mark.rule("P13")
@pytest.mark.rule("P14")
@pytest.mark.rule("P15")
def test_a_concurrent_write_fails_the_commit_after_the_preview(isolated: Settings, driver: Driver) -> None:
    run = "run-save-conflict"
    block_id = first_block(driver, run)
    other = open_log(isolated)  # another writer (a zombie consumer, a second instance)

    def interfere(items: Sequence[tuple[Topic, Message]]) -> None:
        if any(m.type == "answer.preview" for _, m in items):
            driver.before_emit = None
            theirs: PublicationRun = other.repository.get(PublicationRun.id_for(run))
            theirs.grant_evidence("src-late", "public", "publisher", "late grant")
            other.save(theirs)

    driver.before_emit = interfere
    driver.produce(part(run, "s-revised", "Revised body.", replaces=block_id))
    inbound = driver.poll(1)
    try:
        with pytest.raises(IntegrityError):
            driver.process(inbound)
    finally:
        other.close()
    # The failure is a fact in the log, announced once by the relay (not also sent directly).
    assert [m.type for _, m in driver.emitted][-1] == "answer.preview"
    assert_failed_but_quota_kept(isolated, run, block_id, "integrity_error")
    assert_preview_then_failure_and_no_promotion(isolated, driver, run, block_id)
    failures = [v for v in topic_of_run(isolated, run, lambda vs: any(v["type"] == "answer.save_failed" for v in vs))
                if v["type"] == "answer.save_failed"]
    assert len({v["event_id"] for v in failures}) == 1, "one failure, one save_failed"

    driver.process(inbound)  # the consumer retries the poll: now it really commits
    assert_retry_commits_once(isolated, driver, run, block_id)


@pytest.mark.rule("P13")
@pytest.mark.rule("P14")
@pytest.mark.rule("P15")
@pytest.mark.backends("postgres", reason="a privilege revoked on the tracking table: SQLite has no privileges")
def test_a_refused_tracked_transaction_fails_the_commit_after_the_preview(isolated: Settings, driver: Driver) -> None:
    run = "run-save-privilege"
    block_id = first_block(driver, run)
    assert isolated.database_url and isolated.database_schema
    tracking = sql.Identifier(isolated.database_schema, "publication_tracking")
    with psycopg.connect(isolated.database_url, autocommit=True) as connection:
        connection.execute(sql.SQL("REVOKE INSERT ON {} FROM CURRENT_USER").format(tracking))
        driver.produce(part(run, "s-revised", "Revised body.", replaces=block_id))
        inbound = driver.poll(1)
        with pytest.raises(PersistenceError):
            driver.process(inbound)
        assert [m.type for _, m in driver.emitted][-1] == "answer.preview"  # save_failed comes from the log
        assert_failed_but_quota_kept(isolated, run, block_id, "ProgrammingError")
        with pytest.raises(PersistenceError):
            driver.process(inbound)  # still refused: still not committed, quota not charged twice
        assert_failed_but_quota_kept(isolated, run, block_id, "ProgrammingError")
        connection.execute(sql.SQL("GRANT INSERT ON {} TO CURRENT_USER").format(tracking))

    assert_preview_then_failure_and_no_promotion(isolated, driver, run, block_id)  # (the relay tracks there too)
    driver.process(inbound)
    assert_retry_commits_once(isolated, driver, run, block_id)

"""Real processes, real SIGKILLs (SPEC §7: at-least-once on the wire, exactly-once
effects; P14: ``answer.published`` only from committed events, relayed from the log).

* The ``publication`` consumer dies right after PostgreSQL committed a poll together with
  its tracking record, before Kafka got the offsets. Restarted, it is handed the same
  records again and applies none of them twice.
* The relay dies after Kafka acknowledged a batch but before its position was recorded,
  and again at an arbitrary moment mid-stream. Restarted, every committed event reaches
  the topic, in log order; the only duplicates are re-sends with the same ``event_id``."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter, defaultdict

import pytest

from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from imprint.publication import announce
from services.common.settings import Settings
from services.publication.relay import RELAY_NAME
from tests.fault.faultsupport import wait_until
from tests.integration.publication.pubsupport import (
    admitted,
    committed_offset,
    dedupe,
    has_published,
    log_of,
    part,
    published,
    run_events,
    send,
    wait_run,
)
from tests.support.kafka import partition_of, read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.fault, pytest.mark.timeout(150)]


@pytest.mark.rule("P15")
@pytest.mark.rule("P14")
def test_killed_between_the_database_commit_and_the_offset_commit_applies_nothing_twice(isolated: Settings) -> None:
    s, run, n = isolated, "run-kill-consumer", 40
    stack = Stack(s, parts=())
    try:
        stack.start("relay")
        stack.start("publication", module="tests.fault.crash_publication", env={"IMPRINT_TEST_KILL_AFTER_COMMITS": "1"})
        send(s, admitted(run), *(part(run, f"k-{i}", f"Block {i}.") for i in range(n)))
        assert stack.wait_exit("publication", timeout=60) == -signal.SIGKILL
        assert "fault: SIGKILL after a commit" in stack.log("publication")

        # The window really existed: the log has the poll, Kafka's group offset does not.
        tracking = f"{s.topic(Topic.RUNTIME)}#{partition_of(s, run)}"
        with log_of(s) as app:
            tracked = app.recorder.max_tracking_id(tracking)
            before = app.run(run)
        assert tracked is not None and before is not None and before.candidates, "a poll with candidates committed"
        assert asyncio.run(committed_offset(s, "publication", Topic.RUNTIME, partition_of(s, run))) <= tracked, \
            "Kafka never received the offsets of the committed poll"

        stack.start("publication")  # the real one
        send(s, part(run, "k-marker", "After the restart."))
        values = wait_run(s, run, has_published("After the restart."), timeout=60)
        publication_log = stack.log("publication")
    finally:
        stack.__exit__(None, None, None)

    assert "redelivered positions skipped" in publication_log, "the committed poll was really handed over again"
    commits = [e for e in run_events(s, run) if type(e).__name__ == "BlockRevisionCommitted"]
    per_candidate = Counter(e.candidate_id for e in commits)
    assert per_candidate == Counter({f"tool:k-{i}": 1 for i in range(n)} | {"tool:k-marker": 1}), \
        "exactly one revision per candidate"
    announced = dedupe(published(values))
    assert len(announced) == len(commits), "one answer.published per committed event (after dedupe by event_id)"
    assert len({(v["block"]["block_id"], v["block"]["revision"]) for v in announced}) == len(commits)
    assert sorted(v["block"]["delivery_ordinal"] for v in announced) == list(range(1, n + 2))
    ids_per_revision: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
    for v in published(values):
        ids_per_revision[(v["block"]["block_id"], v["block"]["revision"])].add(v["event_id"])
    assert all(len(ids) == 1 for ids in ids_per_revision.values()), "a re-send never carries a new event_id"


def relay_position(settings: Settings) -> int:
    with log_of(settings) as app:
        return app.recorder.max_tracking_id(RELAY_NAME) or 0


@pytest.mark.rule("P14")
def test_a_relay_killed_mid_stream_loses_nothing_and_keeps_the_log_order(isolated: Settings) -> None:
    # The relay as a process of its own (Publication's inline relay off: this is about that process).
    s, runs, n = isolated.model_copy(update={"publication_relay": "separate"}), ("run-relay-a", "run-relay-b"), 60
    stack = Stack(s, parts=())
    try:
        stack.start("publication")
        send(s, *(admitted(r) for r in runs),
             *(part(r, f"{r}-{i}", f"{r} block {i}.") for i in range(n) for r in runs))
        with log_of(s) as app:
            wait_until(lambda: all((found := app.run(r)) is not None and len(found.candidates) == n for r in runs),
                       timeout=60, what="every candidate committed")
            notifications = app.recorder.select_notifications(start=1, limit=100_000)
            expected = [m for m in (announce(app.mapper.to_domain_event(x)) for x in notifications) if m is not None]
            last = notifications[-1].id
        assert len(expected) == 2 * n

        # 1. Dies after Kafka acknowledged its 3rd batch of 10, before recording that position.
        stack.start("relay", module="tests.fault.crash_relay",
                    env={"IMPRINT_TEST_RELAY_BATCH": "10", "IMPRINT_TEST_KILL_AFTER_BATCHES": "3"})
        assert stack.wait_exit("relay", timeout=60) == -signal.SIGKILL
        # A position is recorded at most every RECORD_SECONDS, while the next batch is produced
        # (services/common/relay.py): batch 1's or 2's record may or may not have been written
        # by the kill; batch 3's never was.
        assert relay_position(s) in (0, 10, 20), "batch 3 on the topic but not recorded (nor anything after it)"

        # 2. Killed from outside at an arbitrary moment while it streams (small, paced batches).
        stack.start("relay", module="tests.fault.crash_relay",
                    env={"IMPRINT_TEST_RELAY_BATCH": "5", "IMPRINT_TEST_RELAY_PAUSE": "0.1"})
        wait_until(lambda: relay_position(s) > 40, timeout=60, what="the relay to make progress")
        assert stack.kill("relay") == -signal.SIGKILL
        mid = relay_position(s)
        assert 40 < mid < last, "killed mid-stream"

        # 3. The real relay resumes from the recorded position.
        stack.start("relay")
        ids = {str(m.event_id) for m in expected}
        values = asyncio.run(read_topic(s, Topic.PUBLICATION, until=lambda vs: ids <= {v["event_id"] for v in vs},
                                        timeout=60))
    finally:
        stack.__exit__(None, None, None)

    relayed = [v for v in values if v["type"] != "answer.preview"]
    order = [v["event_id"] for v in dedupe(relayed)]
    assert sorted(order) == sorted(str(m.event_id) for m in expected), "every committed event, once after dedupe"
    for r in runs:  # the topic has several partitions: the order kept is each run's (its key's)
        assert [v["event_id"] for v in dedupe(relayed) if v["run_id"] == r] == \
            [str(m.event_id) for m in expected if m.run_id == r], "every committed event, first seen in log order"
    copies = Counter(v["event_id"] for v in relayed)
    assert any(c > 1 for c in copies.values()), "the unrecorded batch was sent again"
    by_id = defaultdict(set)
    for v in relayed:
        by_id[v["event_id"]].add(json.dumps(v, sort_keys=True))
    assert all(len(bodies) == 1 for bodies in by_id.values()), "a duplicate is the same message, byte for byte"
    wire = {str(m.event_id): json.loads(encode(m)) for m in expected}
    assert all(json.loads(next(iter(by_id[i]))) == wire[i] for i in wire), "what was relayed is what was committed"
    per_revision = defaultdict(set)
    for v in relayed:
        per_revision[(v["block"]["block_id"], v["block"]["revision"])].add(v["event_id"])
    assert all(len(i) == 1 for i in per_revision.values())

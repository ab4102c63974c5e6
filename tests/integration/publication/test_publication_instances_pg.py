"""Two Publication instances over one PostgreSQL log, each holding hot aggregates in
memory (no copy, no fast-forward read per message). Effects that cross runs —
a source revocation (P21), a conversation deletion (X8) — are processed by one
instance while another holds the affected runs: the holder never commits on its
stale copy (it loses on the aggregate version, reloads and decides again), no
withdrawal is lost, none is applied twice."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import count

import pytest
from eventsourcing.persistence import IntegrityError

from imprint.contracts.base import Message
from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.topics import Topic
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.publication.application import PublicationLog
from services.publication.application import open_log
from tests.integration.publication.pubsupport import admitted, granted, part, read_run, registered, revoked

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90),
              pytest.mark.backends("postgres", reason="two Publication instances on one shared log")]


class Instance:
    """One Publication process's log, fed positions by hand (as its consumer would)."""

    def __init__(self, settings: Settings, offsets: dict[str, count]) -> None:
        self.app: PublicationLog = open_log(settings)
        self.offsets = offsets
        self.emitted: list[Message] = []

    def feed(self, topic: Topic, *messages: Message, partition: int = 0) -> int:
        """Process one poll, redelivering it after a failure as the consumer does; returns the attempts."""
        position = self.offsets.setdefault(f"{topic.value}#{partition}", count())
        batch = [Inbound(topic.value, partition, next(position), m, size=1000) for m in messages]
        for attempt in range(1, 6):
            try:
                self.app.process(batch, self.emit)
                return attempt
            except IntegrityError:
                continue  # nack + redelivery
        raise AssertionError("the poll never committed")

    def emit(self, items: Sequence[tuple[Topic, Message]]) -> None:
        self.emitted.extend(m for _, m in items)


@pytest.fixture
def pair(isolated: Settings) -> Iterator[tuple[Instance, Instance]]:
    offsets: dict[str, count] = {}
    a, b = Instance(isolated, offsets), Instance(isolated, offsets)
    try:
        yield a, b
    finally:
        a.app.close()
        b.app.close()


@pytest.mark.rule("P21")
def test_a_revocation_by_another_instance_reaches_a_run_held_in_memory(
    isolated: Settings, pair: tuple[Instance, Instance]
) -> None:
    a, b = pair
    run, source = "run-held", "src-held"
    a.feed(Topic.SOURCES, registered(source), partition=1)
    a.feed(Topic.RUNTIME, admitted(run), granted(run, source), part(run, "h-1", f"Cites [[cite:{source}]]."))
    # The cited block is revised away from the source: the run stays a dependent, with no live block on it.
    (block_id,) = read_run(isolated, run).blocks
    a.feed(Topic.RUNTIME, part(run, "h-2", "No citation any more.", replaces=block_id))
    assert read_run(isolated, run).live_blocks()[0].effective_sources == ()

    b.feed(Topic.SOURCES, revoked(source), partition=1)  # B owns the sources partition now
    # A still holds the run and the source from before the revocation, and cites the source again.
    attempts = a.feed(Topic.RUNTIME, part(run, "h-3", f"Cites it again [[cite:{source}]]."))

    assert attempts == 2, "A's write on its stale copy lost on the run's version, then A reloaded"
    logged = read_run(isolated, run)
    outcome = logged.settled("tool:h-3")
    assert outcome is not None and [(b.kind, b.reason) for b in outcome.blocks] == [("rejected", "unauthorized_source")]
    assert not [b for b in logged.blocks.values() if b["candidate_id"] == "tool:h-3"], "never committed"
    assert logged.save_failures == {"tool:h-3": "integrity_error"}, "the preview on stale state is a failed save"
    withdrawn = [e for e in a.app.events.get(logged.id) if type(e).__name__ == "BlockWithdrawn"]
    assert len({(e.block_id, e.revision) for e in withdrawn}) == len(withdrawn), "no double withdrawal"


@pytest.mark.rule("X8")
def test_a_deletion_by_another_instance_stops_a_run_held_in_memory(
    isolated: Settings, pair: tuple[Instance, Instance]
) -> None:
    a, b = pair
    run = "run-held-deleted"
    a.feed(Topic.RUNTIME, admitted(run))  # admitted, no block yet: a deletion withdraws nothing here
    b.feed(Topic.CONTROL, ConversationDeleteRequested(conversation_id=f"conv-{run}", account_id="acct-1"),
           partition=2)
    assert a.feed(Topic.RUNTIME, part(run, "d-1", "A body after the deletion.")) == 2, \
        "A's write on its stale copy lost (the deletion marked the run), then A reloaded"

    logged = read_run(isolated, run)
    assert logged.blocks == {} and logged.settled("tool:d-1") is None, "no body for a deleted conversation"
    refusals = [e.reason for e in a.app.events.get(logged.id) if type(e).__name__ == "CandidateRefused"]
    assert refusals == ["conversation_deleted"]
    assert logged.save_failures == {"tool:d-1": "integrity_error"}, "its preview on stale state is a failed save"


@pytest.mark.rule("P15")
def test_a_poll_over_several_partitions_commits_once_and_a_partial_redelivery_applies_the_rest(
    isolated: Settings, pair: tuple[Instance, Instance]
) -> None:
    a, b = pair
    runs = ("run-p0", "run-p1")
    poll = [Inbound(Topic.RUNTIME.value, p, 0, admitted(run), size=100) for p, run in enumerate(runs)]
    poll += [Inbound(Topic.RUNTIME.value, p, 1, part(run, f"pp-{p}", f"Block of partition {p}."), size=100)
             for p, run in enumerate(runs)]
    a.app.process(poll, a.emit)
    assert [a.app.position(f"{Topic.RUNTIME.value}#{p}") for p in (0, 1)] == [1, 1]
    # B polls partition 0 again (already recorded by A) together with new work on partition 1.
    again = [*poll[:1], *poll[2:3], Inbound(Topic.RUNTIME.value, 1, 2, part("run-p1", "pp-late", "Late block."), size=100)]
    b.app.process(again, b.emit)
    p0, p1 = read_run(isolated, "run-p0"), read_run(isolated, "run-p1")
    assert len(p0.blocks) == 1, "partition 0's messages were not applied twice"
    assert sorted(b["candidate_id"] for b in p1.blocks.values()) == ["tool:pp-1", "tool:pp-late"]
    assert b.app.position(f"{Topic.RUNTIME.value}#1") == 2

"""Envelopes at the edges of the transport (P3, SPEC §7), against the real
``publication`` consumer and relay processes: a value over the 1 MiB transport cap
(the runtime topic's ``max.message.bytes`` is raised so the broker accepts 2 MB), a
900 KB value of garbage, and a value nested deeper than any JSON parser allows. Each
must end in a dead letter naming its offset, and the consumer must go on with the
messages behind it on the same partition (and with the messages fetched in the same poll)."""

from __future__ import annotations

import asyncio
import base64

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from imprint.contracts.registry import TRANSPORT_CAP_BYTES
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from tests.integration.publication.pubsupport import (
    admitted,
    dedupe,
    has_published,
    part,
    published,
    read_run,
    send,
    wait_committed,
    wait_run,
)
from tests.integration.publication.test_publication_fuzz import envelope, produce_raw
from tests.support.kafka import read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BIG = 4 * 1024 * 1024


async def raise_topic_limit(settings: Settings, topic: Topic, limit: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, settings.topic(topic),
                                                  configs={"max.message.bytes": str(limit)})])
    finally:
        await admin.close()


def barrage_then_marker(settings: Settings, run: str, hostile: list[bytes]) -> tuple[list[int], list[dict]]:
    """Produce ``hostile`` between two valid parts of ``run``; wait for the second one."""
    send(settings, admitted(run), part(run, "before", "Committed before."))
    wait_run(settings, run, has_published("Committed before."))
    offsets = asyncio.run(produce_raw(settings, Topic.RUNTIME, [(run.encode(), v) for v in hostile],
                                      max_request_size=BIG))
    send(settings, part(run, "after", "Committed after."))
    values = wait_run(settings, run, has_published("Committed after."), timeout=6)
    return offsets, values


def letters_for(settings: Settings, offsets: list[int], timeout: float = 15) -> dict[int, dict]:
    letters = asyncio.run(read_topic(settings, Topic.DEADLETTER, until=lambda vs: {
        v["offset"] for v in vs if v["topic"] == settings.topic(Topic.RUNTIME)} >= set(offsets), timeout=timeout))
    return {v["offset"]: v for v in letters if v["topic"] == settings.topic(Topic.RUNTIME)}


def assert_dead_lettered_and_moved_on(settings: Settings, run: str, hostile: bytes, reason: str) -> None:
    """``hostile`` between two valid parts of ``run`` (Publication and the relay running):
    dead-lettered for ``reason`` with its original bytes, and both parts committed."""
    with Stack(settings, parts=("publication", "relay")):
        offsets, values = barrage_then_marker(settings, run, [hostile])
        letters = letters_for(settings, offsets)
    assert letters[offsets[0]]["reason"] == reason
    kept = base64.b64decode(letters[offsets[0]]["original_b64"])
    assert kept and hostile.startswith(kept), "the dead letter carries the original bytes (or their prefix)"
    assert [v["block"]["content"]["markdown"] for v in dedupe(published(values))] == [
        "Committed before.", "Committed after."]


@pytest.mark.rule("P3")
def test_a_deeply_nested_envelope_is_dead_lettered_and_its_poll_mates_are_not_lost(isolated: Settings) -> None:
    s, run = isolated, "run-env-deep"
    deep = envelope(run, "deep").replace(b'"x"', b"[" * 20000 + b"]" * 20000)
    mates = [envelope(run, f"mate-{i}", arguments={"markdown": f"Poll mate {i}."}) for i in range(5)]
    with Stack(s, parts=("publication", "relay")):
        send(s, admitted(run), part(run, "before", "Committed before."))
        wait_run(s, run, has_published("Committed before."))
        # one produce call: the hostile value and its mates arrive in the same poll
        offsets = asyncio.run(produce_raw(s, Topic.RUNTIME, [(run.encode(), v) for v in [mates[0], deep, *mates[1:]]],
                                          together=True))
        wait_committed(s, "publication", Topic.RUNTIME, past=offsets[-1])  # the consumer is done with them
        send(s, part(run, "after", "Committed after."))
        values = wait_run(s, run, has_published("Committed after."), timeout=10)
        bodies = {v["block"]["content"]["markdown"] for v in dedupe(published(values))}
        assert {f"Poll mate {i}." for i in range(5)} <= bodies, f"poll mates lost: {sorted(bodies)}"
        assert letters_for(s, [offsets[1]], timeout=5)[offsets[1]]["reason"] == "unparseable"


@pytest.mark.rule("P3")
def test_a_900_kb_garbage_envelope_is_dead_lettered_and_the_partition_moves_on(isolated: Settings) -> None:
    s, run = isolated, "run-env-garbage"
    garbage = bytes(range(128, 256)) * 7000  # ~900 KB, not UTF-8, under the transport cap
    assert len(garbage) < TRANSPORT_CAP_BYTES
    assert_dead_lettered_and_moved_on(s, run, garbage, "unparseable")


@pytest.mark.rule("P3")
def test_an_envelope_over_the_transport_cap_is_dead_lettered_and_the_partition_moves_on(isolated: Settings) -> None:
    s, run = isolated, "run-env-oversized"
    asyncio.run(raise_topic_limit(s, Topic.RUNTIME, BIG))
    oversized = envelope(run, "huge", arguments={"markdown": "y" * (2 * 1024 * 1024)})
    assert len(oversized) > TRANSPORT_CAP_BYTES
    assert_dead_lettered_and_moved_on(s, run, oversized, "oversized")
    logged = read_run(s, run)
    assert "tool:huge" not in logged.candidates, "never a candidate"

"""One answer block from a runtime proposal on Kafka, through the Publication log in
PostgreSQL and the relay, to an SSE frame read by a real HTTP client."""

from __future__ import annotations

import asyncio

import pytest

from imprint.contracts.runtime import AnswerPart, EvidenceGranted, RunAdmitted, QuestionConditionSet
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.kafka import produce, read_topic
from tests.support.sse import read_frames
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def admitted(run_id: str, account: str = "acct-1") -> RunAdmitted:
    return RunAdmitted(
        run_id=run_id, account_id=account, conversation_id=f"conv-{run_id}", message_id=f"msg-{run_id}",
        question="What is the boiling point of water?", qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"),
    )


def part(run_id: str, call: str, markdown: str, **arguments: object) -> AnswerPart:
    return AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id=call, sealed=True,
                      arguments={"markdown": markdown, **arguments})


@pytest.mark.rule("P1")
@pytest.mark.rule("P14")
@pytest.mark.rule("D1")
def test_answer_part_reaches_the_browser_stream_and_resumes_without_gap_or_repeat(isolated: Settings) -> None:
    run = "run-e2e-1"
    token = mint_token(isolated, "acct-1")
    with Stack(isolated) as stack:
        asyncio.run(produce(isolated, Topic.RUNTIME,
                            admitted(run),
                            EvidenceGranted(run_id=run, source_id="src-public-1", scope="public",
                                            owner_account_id="acct-1", title="Handbook"),
                            part(run, "call-1", "Water boils at 100 °C at sea level [[cite:src-public-1]]."),
                            part(run, "call-2", "At altitude it boils lower.")))
        stack.wait_for_run(run, token)

        def two_published(frames: list) -> bool:
            return sum(f.event == "answer-publication" for f in frames) >= 2

        first = read_frames(stack.base_url, run, token, until=two_published)
        published = [f for f in first if f.event == "answer-publication"]
        assert [p.json["block"]["delivery_ordinal"] for p in published] == [1, 2]
        assert published[0].json["block"]["citations"] == [{"source_id": "src-public-1", "status": "valid"}]
        assert published[0].json["block"]["source_hint"] == "sources_verified"
        assert published[0].json["block"]["receipt"]["log_position"] >= 1
        ids = [f.id for f in first if f.id is not None]
        assert ids == sorted(set(ids)), "ids are per-run monotonically increasing"

        # Drop after the first publication frame, then resume from its id.
        cut = published[0].id
        asyncio.run(produce(isolated, Topic.RUNTIME, part(run, "call-3", "A third block.")))
        resumed = read_frames(stack.base_url, run, token, last_event_id=cut,
                              until=lambda fs: sum(f.event == "answer-publication" for f in fs) >= 2)
        resumed_ids = [f.id for f in resumed if f.id is not None]
        assert resumed_ids[0] == cut + 1, "no gap after Last-Event-ID"
        assert not set(resumed_ids) & {i for i in ids if i <= cut}, "no repeat of frames the client holds"
        bodies = [f.json["block"]["content"]["markdown"] for f in resumed if f.event == "answer-publication"]
        assert bodies[-1] == "A third block."


@pytest.mark.rule("P15")
def test_a_redelivered_runtime_message_yields_one_revision_and_one_published_event(isolated: Settings) -> None:
    run = "run-e2e-redelivery"
    with Stack(isolated, parts=("publication", "relay")) as stack:
        asyncio.run(produce(isolated, Topic.RUNTIME, admitted(run), part(run, "call-1", "Only once.")))
        asyncio.run(read_topic(isolated, Topic.PUBLICATION,
                               until=lambda vs: any(v["type"] == "answer.published" for v in vs)))
        # Kill the consumer, rewind its group to the beginning, start it again: every
        # message is consumed a second time.
        stack.kill("publication")
        asyncio.run(rewind_group(isolated, "publication"))
        stack.start("publication")
        asyncio.run(produce(isolated, Topic.RUNTIME, part(run, "call-2", "Marker after the redelivery.")))
        values = asyncio.run(read_topic(isolated, Topic.PUBLICATION, until=lambda vs: any(
            v["type"] == "answer.published" and v["block"]["content"]["markdown"].startswith("Marker") for v in vs)))
    published = [v for v in values if v["type"] == "answer.published"]
    only_once = [v for v in published if v["block"]["content"]["markdown"] == "Only once."]
    assert len({v["event_id"] for v in only_once}) == 1, "one answer.published per committed event after dedupe"
    assert {v["block"]["revision"] for v in only_once} == {1}
    assert [v["block"]["delivery_ordinal"] for v in published if v["block"]["content"]["markdown"].startswith("Marker")] == [2]
    assert "redelivered positions skipped" in stack.log("publication"), "the rewind really redelivered"
    assert "batch failed" not in stack.log("publication")


async def rewind_group(settings: Settings, consumer: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    group = f"{settings.group_prefix}.{consumer}"
    partitions = [TopicPartition(settings.topic(t), p)
                  for t in (Topic.RUNTIME, Topic.SOURCES) for p in range(settings.topic_partitions)]
    for _ in range(60):
        kafka = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=group, enable_auto_commit=False)
        await kafka.start()
        try:
            kafka.assign(partitions)
            await kafka.commit({tp: OffsetAndMetadata(0, "") for tp in partitions})
            return
        except Exception:  # the killed member's session has not expired yet
            await asyncio.sleep(1)
        finally:
            await kafka.stop()
    raise AssertionError("could not rewind the consumer group")


@pytest.mark.rule("P2")
def test_unparseable_and_schema_invalid_messages_are_dead_lettered_and_the_consumer_keeps_running(
    isolated: Settings,
) -> None:
    run = "run-e2e-dlq"
    garbage = b"\xff\xfe not json"
    invalid = b'{"type": "answer.part", "run_id": "run-e2e-dlq"}'
    with Stack(isolated, parts=("publication", "relay")):
        asyncio.run(produce(isolated, Topic.RUNTIME, garbage, invalid, key=run.encode()))
        asyncio.run(produce(isolated, Topic.RUNTIME, admitted(run), part(run, "call-1", "Still here.")))
        letters = asyncio.run(read_topic(isolated, Topic.DEADLETTER, until=lambda vs: len(vs) >= 2))
        asyncio.run(read_topic(isolated, Topic.PUBLICATION,
                               until=lambda vs: any(v["type"] == "answer.published" for v in vs)))
    import base64

    assert {v["reason"] for v in letters} == {"unparseable", "schema_invalid"}
    assert {base64.b64decode(v["original_b64"]) for v in letters} == {garbage, invalid}
    assert all(v["topic"] == isolated.topic(Topic.RUNTIME) and v["consumer"] == "publication" for v in letters)


@pytest.mark.rule("P3")
def test_every_consumer_dead_letters_what_it_cannot_decode_on_every_topic_it_reads(isolated: Settings) -> None:
    """Each consumer refuses bad bytes on each of its topics with a recorded reason, then keeps going."""
    expected = {
        ("publication", Topic.RUNTIME), ("publication", Topic.SOURCES), ("publication", Topic.CONTROL),
        ("journal", Topic.RUNTIME), ("journal", Topic.PUBLICATION), ("journal", Topic.SOURCES),
        ("journal", Topic.CONTROL),
        ("delivery", Topic.PUBLICATION), ("delivery", Topic.RUNS),
    }
    topics = {topic for _, topic in expected}
    with Stack(isolated) as stack:
        for topic in topics:
            asyncio.run(produce(isolated, topic, b'{"type": "no.such.type", "run_id": "r"}', key=b"r"))
        letters = asyncio.run(read_topic(isolated, Topic.DEADLETTER, until=lambda vs: len(vs) >= len(expected)))
        # Still consuming: a valid run goes all the way through afterwards.
        run = "run-after-garbage"
        token = mint_token(isolated, "acct-1")
        asyncio.run(produce(isolated, Topic.RUNTIME, admitted(run), part(run, "call-1", "Alive.")))
        stack.wait_for_run(run, token)
        frames = read_frames(stack.base_url, run, token,
                             until=lambda fs: any(f.event == "answer-publication" for f in fs))
    seen = {(v["consumer"], v["topic"].removeprefix(isolated.topic_prefix)) for v in letters}
    assert seen == {(consumer, topic.value) for consumer, topic in expected}
    assert all(v["reason"] == "unknown_type" for v in letters)
    assert any(f.event == "answer-publication" for f in frames)


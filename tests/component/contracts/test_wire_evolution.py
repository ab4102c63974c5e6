"""R8 on the wire: messages evolve additively. A consumer accepts every earlier minor
version of a message, and a message of a newer one: its unknown fields are ignored and
recorded (a metric and a log line naming the type and the fields, never a value), and the
message is applied — never dead-lettered for them.

* ``required_fields.v1.json`` holds the fields each model of the v1 contract requires, as
  this release wrote it down (never regenerated; a new model is added with its own): a field
  required today must be one every earlier message carries, so nothing becomes required;
* messages of every topic with unknown fields, at the top and nested, decode to what they
  say without them, and the fields are named; a message of an earlier shape decodes;
* through a consumer's intake (``decode_records``) such a message is applied — committed
  by Publication — and recorded, not refused; a message that is wrong besides is still refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka import ConsumerRecord

from imprint.contracts.deadletter import DeadLetter
from imprint.contracts.registry import TOPIC_MESSAGES, decode, decode_noting_unknown, encode
from imprint.contracts.topics import Topic
from imprint.recovery.integrity import body_sha256
from services.common import evolution
from services.common.kafka import decode_records
from services.common.settings import Settings
from services.publication.application import open_log
from tests.support.delivery_builders import published

pytestmark = pytest.mark.rule("R8")

BASELINE = Path(__file__).with_name("required_fields.v1.json")
SETTINGS = Settings(topic_prefix="t.")
SECRET = "a value that must never be logged"


def required_fields() -> dict[str, list[str]]:
    """Each model of each topic's union (nested ones too) → the fields it requires."""
    found = {}
    for topic, adapter in TOPIC_MESSAGES.items():
        schema = adapter.json_schema()
        models = dict(schema.get("$defs", {}))
        if "properties" in schema:  # a topic of one model (dead letters)
            models[schema["title"]] = schema
        for name, model in models.items():
            found[f"{topic.value}:{name}"] = sorted(model.get("required", []))
    return found


def test_no_field_of_the_v1_contract_becomes_required() -> None:
    baseline = json.loads(BASELINE.read_text())
    today = required_fields()
    newly_required = {name: sorted(set(fields) - set(baseline[name]))
                      for name, fields in today.items() if name in baseline and set(fields) - set(baseline[name])}
    assert newly_required == {}, "an earlier message lacks these: give each a default"
    unlisted = sorted(today.keys() - baseline.keys())
    assert unlisted == [], f"add each new model to {BASELINE.name} with the fields it requires"


ADMITTED = {"type": "run.admitted", "event_id": "4a7e3f50-1b2c-4d5e-8f90-a1b2c3d4e5f6",
            "occurred_at": "2026-12-03T09:00:00Z", "run_id": "run-w", "account_id": "acct-w",
            "conversation_id": "conv-w", "message_id": "msg-w", "question": "Why?",
            "qcs": {"qcs_id": "qcs-w", "conditions": [{"name": "year", "value": "2024"}]}}
PART = {"type": "answer.part", "event_id": "5b8f4061-2c3d-4e6f-9a01-b2c3d4e5f6a7",
        "occurred_at": "2026-12-03T09:00:01Z", "run_id": "run-w", "turn_id": "turn-1", "tool_call_id": "call-w",
        "sealed": True, "arguments": {"markdown": "Applied although it came from a newer producer."}}


def with_fields(message: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """``message`` with a value at each dotted path (``qcs.conditions.0.weight``)."""
    out = json.loads(json.dumps(message))
    for path, value in paths.items():
        *steps, last = path.split("__")
        at: Any = out
        for step in steps:
            at = at[int(step)] if step.isdigit() else at[step]
        at[last] = value
    return out


def newer(topic: Topic) -> tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]:
    """A message of ``topic`` as this version writes it, the same with fields of a newer
    version added, and the names those fields must be recorded by."""
    if topic is Topic.RUNTIME:
        return ADMITTED, with_fields(ADMITTED, priority=SECRET, qcs__origin=SECRET,
                                     qcs__conditions__0__weight=SECRET), (
            "priority", "qcs.conditions.weight", "qcs.origin")
    if topic is Topic.PUBLICATION:
        current = json.loads(encode(published("run-w", "blk-w", 1, "The answer.")))
        return current, with_fields(current, block__content__lang=SECRET, block__receipt__region=SECRET), (
            "block.content.lang", "block.receipt.region")
    envelope = {"event_id": "7dab6283-4e5f-4081-9c23-d4e5f6a7b8c9", "occurred_at": "2026-12-03T09:00:02Z"}
    samples = {
        Topic.SOURCES: {"type": "source.revoked", "source_id": "src-w", "reason": "retracted"},
        Topic.CONTROL: {"type": "run.cancel_requested", "run_id": "run-w", "account_id": "acct-w"},
        Topic.RUNS: {"type": "run.transitioned", "run_id": "run-w", "account_id": "acct-w",
                     "conversation_id": "conv-w", "state": "queued", "sequence": 1},
        Topic.DELIVERY: {"type": "client.received", "run_id": "run-w", "account_id": "acct-w"},
        Topic.DEADLETTER: {"type": "deadletter", "reason": "unparseable", "detail": "d", "consumer": "c",
                           "topic": "t", "partition": 0, "offset": 1, "original_b64": ""},
    }
    current = {**samples[topic], **envelope}
    return current, with_fields(current, added_in_v1_9=SECRET), ("added_in_v1_9",)


@pytest.mark.parametrize("topic", list(Topic), ids=lambda t: t.value)
def test_a_message_with_fields_of_a_newer_version_reads_as_it_does_without_them(topic: Topic) -> None:
    current, newer_message, names = newer(topic)
    decoded = decode_noting_unknown(topic, json.dumps(newer_message).encode())
    assert decoded.message == decode(topic, json.dumps(current).encode())
    assert sorted(decoded.unknown_fields) == sorted(names)
    assert decode_noting_unknown(topic, json.dumps(current).encode()).unknown_fields == ()


def test_a_message_wrong_besides_its_unknown_fields_is_still_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as refused:
        decode(Topic.RUNTIME, json.dumps(with_fields(ADMITTED, run_id="", priority=SECRET)).encode())
    assert [e["loc"] for e in refused.value.errors()] == [("run.admitted", "run_id")], \
        "the error named is the message's own, not the field it may ignore"


def test_messages_of_an_earlier_shape_decode() -> None:
    """A dead letter as consumers wrote it before ``original_size``/``original_sha256``/
    ``original_truncated`` were added; messages without any field that has a default."""
    before = {"type": "deadletter", "event_id": "6c9a5172-3d4e-4f70-8b12-c3d4e5f6a7b8",
              "occurred_at": "2026-11-29T10:00:00Z", "reason": "schema_invalid", "detail": "run_id: too short",
              "consumer": "publication", "topic": "imprint.runtime.v1", "partition": 0, "offset": 7,
              "key_b64": None, "original_b64": base64.b64encode(b"{}").decode()}
    letter = decode(Topic.DEADLETTER, json.dumps(before).encode())
    assert isinstance(letter, DeadLetter) and letter.original == b"{}"
    assert (letter.original_size, letter.original_sha256, letter.original_truncated) == (0, "", False)
    minimal = {
        Topic.RUNTIME: {"type": "evidence.granted", "run_id": "run-w", "source_id": "src-w", "scope": "public",
                        "owner_account_id": "pub"},
        Topic.SOURCES: {"type": "source.revoked", "source_id": "src-w"},
        Topic.DELIVERY: {"type": "client.rendered", "run_id": "run-w", "account_id": "acct-w"},
    }
    for topic, message in minimal.items():
        assert decode_noting_unknown(topic, json.dumps(message).encode()).unknown_fields == ()


# ------------------------------------------------------------------ through a consumer's intake

def record(topic: Topic, offset: int, value: dict[str, Any]) -> ConsumerRecord[Any, Any]:
    raw = json.dumps(value).encode()
    return ConsumerRecord(SETTINGS.topic(topic), 0, offset, 0, 0, b"run-w", raw, None, len(raw), 0,
                          [("type", value["type"].encode())])


def counted(consumer: str, topic: Topic, message_type: str, field: str) -> float:
    value = evolution.METRICS.get_sample_value("imprint_wire_unknown_fields_total", {
        "consumer": consumer, "topic": SETTINGS.topic(topic), "type": message_type, "field": field})
    return value or 0.0


def test_intake_applies_a_newer_message_and_records_its_unknown_fields(tmp_path: Path) -> None:
    consumer = "publication-r8-test"
    records = [record(Topic.RUNTIME, 0, with_fields(ADMITTED, priority=SECRET, qcs__origin=SECRET)),
               record(Topic.RUNTIME, 1, with_fields(PART, trace_hint=SECRET)),
               record(Topic.RUNTIME, 2, with_fields(PART, tool_call_id="call-w2", trace_hint=SECRET,
                                                    run_id=""))]  # wrong besides: refused
    with structlog.testing.capture_logs() as logs:
        inbound, refused = decode_records(SETTINGS, consumer, records)
        decode_records(SETTINGS, consumer, records[1:2])  # the same combination again: counted, not logged

    assert [item.offset for item in inbound] == [0, 1]
    assert [(letter.offset, letter.reason) for letter in refused] == [(2, "schema_invalid")]
    assert counted(consumer, Topic.RUNTIME, "run.admitted", "priority") == 1
    assert counted(consumer, Topic.RUNTIME, "run.admitted", "qcs.origin") == 1
    assert counted(consumer, Topic.RUNTIME, "answer.part", "trace_hint") == 2
    noted = [entry for entry in logs if entry.get("consumer") == consumer and "fields" in entry]
    assert [(entry["message_type"], sorted(entry["fields"]), entry["topic"]) for entry in noted] == [
        ("run.admitted", ["priority", "qcs.origin"], SETTINGS.topic(Topic.RUNTIME)),
        ("answer.part", ["trace_hint"], SETTINGS.topic(Topic.RUNTIME))]
    assert SECRET not in repr(logs), "a field's value is never logged"

    log = open_log(Settings(state_dir=tmp_path, database_url="memory://"))
    try:
        log.process(inbound, lambda _items: None)
        run = log.run("run-w")
        assert run is not None and run.account_id == "acct-w"
        settled = run.settled("tool:call-w")
        assert settled is not None and [b.kind for b in settled.blocks] == ["committed"]
        assert [b["body_sha256"] for b in run.blocks.values()] == [body_sha256(PART["arguments"]["markdown"])]
    finally:
        log.close()


"""Hostile input at the Kafka level (SPEC §7: every bad input gets a clear, recorded
refusal and loses nothing already committed), against the real ``publication``
consumer and relay processes.

Every produced value ends in a typed outcome, checked offset by offset: a dead letter
naming that offset (with the original bytes), or — for what decodes — a settlement or
a recorded refusal in the Publication log and a message on ``imprint.publication.v1``.
Blocks committed before the barrage are unchanged afterwards. A field the contract does
not know is not bad input (R8): the message is applied and the field recorded."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from imprint.contracts.registry import TRANSPORT_CAP_BYTES, decode
from imprint.contracts.topics import Topic
from imprint.publication import Candidate, IntakeRefusal, intake
from imprint.publication.capacity import TRUNCATION_MARKER
from services.common.settings import Settings
from imprint.publication.handling import CANDIDATE_TYPES
from tests.integration.publication.pubsupport import (
    admitted,
    dedupe,
    granted,
    has_published,
    log_of,
    part,
    published,
    read_run,
    run_events,
    send,
    wait_run,
)
from tests.support.kafka import read_topic
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BASE = "run-fuzz-base"
SOURCE = "src-fuzz"
NEWER_SOURCE = "src-fuzz-newer"
CONTROL = "".join(map(chr, [*range(0, 9), 11, 12, *range(14, 32), 0x7F, *range(0x80, 0xA0)]))  # not \t \n \r


async def produce_raw(settings: Settings, topic: Topic, values: list[tuple[bytes | None, bytes]],
                      max_request_size: int = 1048576, *, together: bool = False) -> list[int]:
    """Produce raw values (no contract encoding); returns their offsets. ``together``
    sends them as one producer batch, so a consumer fetches them in one poll."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True,
                                max_request_size=max_request_size, linger_ms=200 if together else 0)
    await producer.start()
    try:
        if together:
            futures = [await producer.send(settings.topic(topic), value, key=key) for key, value in values]
            return [(await future).offset for future in futures]
        offsets = []
        for key, value in values:
            metadata = await producer.send_and_wait(settings.topic(topic), value, key=key)
            offsets.append(metadata.offset)
        return offsets
    finally:
        await producer.stop()


def envelope(run: str, call: str | None = "c", *, sealed: bool = True, arguments: Any = None, **extra: Any) -> bytes:
    value = {"type": "answer.part", "event_id": "6f2b1e0c-3a1d-4a4e-9a5e-0b8c7d6e5f40", "occurred_at": "2026-01-01T00:00:00Z",
             "run_id": run, "turn_id": "turn-1", "tool_call_id": call, "sealed": sealed,
             "arguments": {"markdown": "x"} if arguments is None else arguments, **extra}
    return json.dumps(value).encode()


def handcrafted(base_block: str) -> dict[str, bytes]:
    """Named hostile values: what each must end in is checked by name below."""
    huge_body = ("Long hostile body [[cite:" + SOURCE + "]] " + "w" * 97 + "\n") * 6600  # ~900 KB
    return {
        "not_utf8": b"\xff\xfe\xfa not utf-8 at all \xc3\x28",
        "empty": b"",
        "json_array": b"[]",
        "json_null": b"null",
        "unknown_type": json.dumps({"type": "answer.delete", "run_id": "run-fz-x"}).encode(),
        "control_in_run_id": envelope("run-fz-\u0001ctl"),
        "lone_surrogate": envelope("run-fz-surrogate", arguments={"markdown": "a\ud800b"}),
        "nesting_400": envelope("run-fz-nest").replace(b'"x"', b"[" * 400 + b"]" * 400),
        "extra_field": envelope("run-fz-extra", hidden="not in the contract"),
        "truncated_json": envelope("run-fz-truncated")[:-7],
        "control_chars": envelope("run-fz-ctl", "c-ctl", arguments={"markdown": f"Clean{CONTROL}text\u202e."}),
        "unmatched_tokens": envelope("run-fz-tokens", "c-tok", arguments={
            "markdown": "[[cite:src-fuzz [[num:]] ]] [[ref: [[cite:]] [[CITE:src-fuzz]] [[cite:src-fuzz]"}),
        "control_tool_call": envelope("run-fz-toolid", "call\u0000\u0007"),
        "arguments_not_json": envelope("run-fz-args", "c-args", arguments='{"markdown": "unterminated'),
        "arguments_a_list": envelope("run-fz-list", "c-list", arguments="[1, 2, 3]"),
        "many_blocks": envelope("run-fz-blocks", "c-blocks", arguments={"blocks": [7] * 5000}),
        "overwrite_with_nothing": envelope(BASE, "c-overwrite", arguments={"markdown": "\u0000\u0001\u0002",
                                                                         "replaces": base_block}),
        "overwrite_with_foreign_id": envelope("run-fz-foreign", "c-foreign", arguments={
            "markdown": "hijack", "replaces": base_block}),
        "huge_valid_body": envelope("run-fz-huge", "c-huge", arguments={"markdown": huge_body}),
    }


def mutations(seed: int, n: int) -> list[bytes]:
    """Seeded random damage to a valid envelope (flips, cuts, insertions, odd text)."""
    rng = random.Random(seed)
    pool = ["\u0000", "\u001b[31m", "\u202e", "\ufeff", "é", "👩‍🔬", "\\", '"', "[[cite:", "]]", "[[num:h]]",
            "[[ref:blk_", "\n", "\t", "\r", "{}", "\u0085", "\u2028"]
    out = []
    for i in range(n):
        text = "".join(rng.choice(pool) + rng.choice("ab ") for _ in range(rng.randint(0, 30)))
        raw = bytearray(envelope(f"run-fz-m{i}", f"m-{i}", arguments={"markdown": text}))
        kind = rng.choice(["flip", "cut", "insert", "none"])
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        elif kind == "cut":
            raw = raw[: rng.randrange(len(raw))]
        elif kind == "insert":
            at = rng.randrange(len(raw))
            raw[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        out.append(bytes(raw))
    return out


def decodes(raw: bytes) -> Any:
    try:
        return decode(Topic.RUNTIME, raw)
    except Exception:  # noqa: BLE001 — the test's own oracle: would the contract decode it?
        return None


@pytest.mark.rule("P2")
@pytest.mark.rule("P3")
@pytest.mark.rule("P4")
@pytest.mark.rule("P5")
@pytest.mark.rule("R8")
def test_every_hostile_envelope_ends_in_a_typed_outcome_and_committed_blocks_stay(
    isolated: Settings,
) -> None:
    s = isolated
    with Stack(s, parts=("publication", "relay")) as stack:
        send(s, admitted(BASE), granted(BASE, SOURCE),
             part(BASE, "base-1", f"Committed before the barrage [[cite:{SOURCE}]]."),
             part(BASE, "base-2", "Second committed block."))
        before = {b["block"]["block_id"]: b["block"] for b in
                  dedupe(published(wait_run(s, BASE, lambda vs: len(dedupe(published(vs))) == 2)))}
        base_block = next(iter(before))

        named = handcrafted(base_block)
        random_values = mutations(seed=20260101, n=60)
        values = [*named.values(), *random_values]
        assert 850_000 < len(named["huge_valid_body"]) < TRANSPORT_CAP_BYTES
        # X1: Publication answers only admitted runs; admit every run the barrage names.
        runs = {m.run_id for v in values if (m := decodes(v)) is not None and getattr(m, "run_id", None)}
        send(s, *(admitted(run) for run in sorted(runs - {BASE})))
        runtime_offsets = asyncio.run(produce_raw(s, Topic.RUNTIME, [(b"fuzz", v) for v in values]))
        sources_garbage = [b"\x00\x01\x02", b'{"type": "source.revoked", "source_id": ""}']
        # R8: a newer producer's field is ignored and recorded; the revocation is applied (to
        # another source than the base run's, whose blocks must stay).
        sources_newer = [json.dumps({"type": "source.revoked", "source_id": NEWER_SOURCE, "extra": 1}).encode()]
        sources_offsets = asyncio.run(produce_raw(s, Topic.SOURCES, [(b"fuzz", v) for v in
                                                                     [*sources_garbage, *sources_newer]]))
        send(s, part(BASE, "base-marker", "marker after the barrage"))
        wait_run(s, BASE, has_published("marker after the barrage"), timeout=60)

        expected_letters = sum(decodes(v) is None for v in values) + len(sources_garbage)
        letters = asyncio.run(read_topic(s, Topic.DEADLETTER, until=lambda vs: len(vs) >= expected_letters))
        publications = asyncio.run(read_topic(s, Topic.PUBLICATION, until=lambda vs: any(
            v["type"] == "answer.published" and v["block"]["candidate_id"] == "tool:base-marker" for v in vs)))
        publication_log = stack.log("publication")
        assert stack.processes["publication"].poll() is None, "the consumer survived"

    # 1. Every value, offset by offset: dead-lettered with its bytes, or decoded and settled/refused.
    by_offset = {(v["topic"], v["offset"]): v for v in letters}
    assert len(by_offset) == len(letters), "one dead letter per refused record"
    for offset, raw in zip(sources_offsets, sources_garbage, strict=False):
        letter = by_offset[(s.topic(Topic.SOURCES), offset)]
        assert base64.b64decode(letter["original_b64"]) == raw
    newer_offset = sources_offsets[len(sources_garbage)]
    assert (s.topic(Topic.SOURCES), newer_offset) not in by_offset, "R8: never dead-lettered for a newer field"
    noted = [line for line in publication_log.splitlines() if "unknown fields ignored" in line]
    assert any("source.revoked" in line and "extra" in line for line in noted), noted
    assert any("answer.part" in line and "hidden" in line for line in noted), noted
    assert "not in the contract" not in publication_log, "names only, never a value"
    said = {v.get("candidate_id") or v.get("block", {}).get("candidate_id") for v in publications}
    names = {offset: name for offset, name in zip(runtime_offsets, named, strict=False)}
    outcomes: dict[str, str] = {}
    with log_of(s) as app:
        for offset, raw in zip(runtime_offsets, values, strict=True):
            letter = by_offset.get((s.topic(Topic.RUNTIME), offset))
            message = decodes(raw)
            if message is None:
                assert letter is not None, f"offset {offset} was neither decoded nor dead-lettered"
                assert base64.b64decode(letter["original_b64"]) == raw and letter["consumer"] == "publication"
                assert letter["reason"] in {"unparseable", "schema_invalid", "unknown_type"}
                outcomes[names.get(offset, f"random@{offset}")] = f"deadletter:{letter['reason']}"
                continue
            assert letter is None, f"offset {offset} decodes but was dead-lettered: {letter}"
            if message.type not in CANDIDATE_TYPES:
                continue
            run = app.run(message.run_id)
            assert run is not None, f"offset {offset}: run {message.run_id} never reached the log"
            result = intake(message, envelope_size=len(raw))
            if isinstance(result, IntakeRefusal):
                refused = [e for e in app.events.get(run.id) if type(e).__name__ == "CandidateRefused"]
                assert result.reason in {e.reason for e in refused}, f"offset {offset}: refusal not recorded"
                outcomes[names.get(offset, f"random@{offset}")] = f"refused:{result.reason}"
            else:
                assert isinstance(result, Candidate)
                settled = run.settled(result.candidate_id)
                assert settled is not None, f"offset {offset}: {result.candidate_id} was never settled"
                assert result.candidate_id in said, f"offset {offset}: nothing on imprint.publication.v1"
                outcomes[names.get(offset, f"random@{offset}")] = "settled:" + ",".join(
                    sorted({b.kind for b in settled.blocks}))

    # 2. The named cases end where they must.
    assert outcomes["not_utf8"] == outcomes["lone_surrogate"] == "deadletter:unparseable"
    assert outcomes["nesting_400"] == "deadletter:unparseable"  # over the JSON parser's depth limit
    assert outcomes["empty"] == outcomes["truncated_json"] == "deadletter:unparseable"
    assert outcomes["unknown_type"] == "deadletter:unknown_type"
    assert outcomes["control_in_run_id"] == "deadletter:schema_invalid"
    assert outcomes["extra_field"] == "settled:committed", "R8: a field of a newer version is ignored, not refused"
    assert outcomes["json_array"].startswith("deadletter:") and outcomes["json_null"].startswith("deadletter:")
    assert outcomes["control_tool_call"] == "refused:invalid_tool_identity"
    assert outcomes["arguments_not_json"] == outcomes["arguments_a_list"] == "refused:unparseable_arguments"
    assert outcomes["control_chars"] == outcomes["unmatched_tokens"] == outcomes["huge_valid_body"] == "settled:committed"
    assert outcomes["many_blocks"] == "settled:rejected"
    assert outcomes["overwrite_with_nothing"] == "settled:rejected"
    assert outcomes["overwrite_with_foreign_id"] == "settled:revision_rejected"
    blocks = {v["block"]["candidate_id"]: v["block"] for v in publications if v["type"] == "answer.published"}
    assert blocks["tool:c-ctl"]["content"]["markdown"] == "Cleantext\u202e."
    assert blocks["tool:c-tok"]["citations"] == [] and blocks["tool:c-tok"]["content"]["markdown"].startswith("[[cite:src-fuzz [[num:]]")
    huge = blocks["tool:c-huge"]
    assert huge["truncated"] and huge["content"]["markdown"].endswith(TRUNCATION_MARKER)
    assert len(huge["content"]["markdown"]) <= s.display_char_limit
    many = [v for v in publications if v["type"] == "answer.rejected" and v["candidate_id"] == "tool:c-blocks"]
    assert len(many) == 65 and {v["reason"] for v in many} == {"malformed_block"}

    # 3. Nothing committed before the barrage changed.
    logged = read_run(s, BASE)
    for block_id, block in before.items():
        record = logged.block(block_id)
        assert record is not None and record.live and record.revision == 1
        assert record.body_sha256 == block["body_sha256"]
    about_base = [v for v in publications if v["run_id"] == BASE and (v.get("block_id") or v.get("block", {}).get("block_id")) in before]
    assert {(v["type"], v["block"]["revision"]) if "block" in v else (v["type"], None) for v in about_base} == {
        ("answer.preview", 1), ("answer.published", 1), ("answer.rejected", None)}, "no new revision, no withdrawal"
    assert "batch failed" not in publication_log
    assert [type(e).__name__ for e in run_events(s, BASE)].count("BlockRevisionCommitted") == 3

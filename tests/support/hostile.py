"""Hostile Kafka records for the fuzz tier (``tests/integration/fuzz``): seeded, so a failing
run is replayed by its seed.

A barrage mixes schema-aware damage to valid messages of the topic (a field of the wrong
type, a missing field, a huge or odd string, a number out of range, a wrong enum value, a
field the contract does not know, duplicated keys, deep nesting), byte-level damage to
their encoding, empty and oversized values, JSON that is not an object, hostile keys and
hostile headers (``type`` and ``traceparent`` garbage, missing, duplicated, huge, not
UTF-8). The valid messages a test interleaves are given to it and keep honest headers."""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imprint.contracts.base import Message
from imprint.contracts.registry import TRANSPORT_CAP_BYTES, encode

ODD_TEXT = ["\u0000", "\u001b[31m", "\u202e", "\ufeff", "\ud800", "é", "👩‍🔬", "\\", '"', "[[cite:", "]]",
            "[[num:h]]", "\n", "\r\n", "\t", "\u0085", "\u2028", "\u200b", "Ω" * 3, "\x7f", "%s%n", "' OR 1=1 --",
            "<script>alert(1)</script>", "../../etc/passwd", "${jndi:ldap://x}", "{{7*7}}", "\U0010ffff"]
ODD_NUMBERS: list[Any] = [-1, 0, -0.0, 2**31, 2**63, -(2**63) - 1, 2**64, 10**40, 1e308, -1e308, 1.5, 3.14159e-300]
WRONG_TYPES: list[Any] = [None, True, False, 0, -1, 1.25, "", "x", [], [1, "a", None], {}, {"nested": {"a": [1]}}]
TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass(frozen=True)
class Record:
    """One record to produce: ``valid`` ones are the interleaved messages whose effect is checked."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    kind: str
    valid: bool = False


def odd_text(rng: random.Random, size: int = 0) -> str:
    if size:
        chunk = "".join(rng.choice(ODD_TEXT) for _ in range(16))
        return (chunk * (size // max(len(chunk), 1) + 1))[:size]
    return "".join(rng.choice(ODD_TEXT) + rng.choice(["a", " ", "b"]) for _ in range(rng.randint(1, 12)))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys and list indexes), the root excluded."""
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        value = value[key]
    return value


def mutate_fields(rng: random.Random, body: dict[str, Any], other_types: Sequence[str]) -> tuple[str, dict[str, Any] | str]:
    """One to three schema-aware mutations of a valid message's JSON body; returns what was
    done and the body (or, for duplicated keys and nesting, its JSON text)."""
    done = []
    for _ in range(rng.randint(1, 3)):
        paths = _paths(body)
        path = rng.choice(paths)
        parent, key = _parent(body, path), path[-1]
        old = parent[key]
        kind = "huge" if rng.random() < 0.01 else rng.choice(
            ["drop", "type", "type", "unicode", "number", "enum", "extra", "empty"])
        if kind == "drop" and isinstance(parent, dict):
            del parent[key]
        elif kind == "type":
            parent[key] = copy.deepcopy(rng.choice(WRONG_TYPES))
        elif kind == "huge":
            parent[key] = odd_text(rng, rng.choice([2_000, 2_000, 20_000, 100_000]))
        elif kind == "unicode":
            parent[key] = (old if isinstance(old, str) else "") + odd_text(rng)
        elif kind == "number":
            parent[key] = rng.choice(ODD_NUMBERS)
        elif kind == "enum":
            parent[key] = rng.choice([*other_types, "", "UNKNOWN", str(old).upper(), str(old) + " ", "answer.delete"])
        elif kind == "extra":
            target = parent if isinstance(parent, dict) else body
            target[rng.choice(["x_newer", "__proto__", "type ", "run_id\u0000", odd_text(rng)])] = copy.deepcopy(
                rng.choice([*WRONG_TYPES, odd_text(rng)]))
        elif kind == "empty":
            parent[key] = copy.deepcopy(rng.choice(["", [], {}]))
        else:
            parent[key] = None
        done.append(f"{kind}:{'.'.join(map(str, path))}")
    if rng.random() < 0.1:  # duplicated keys: the last one wins in Python's parser
        text = json.dumps(body)
        return "+".join([*done, "dupkeys"]), '{"type": "run.admitted", "run_id": 7, ' + text[1:]
    return "+".join(done), body


def mutate_bytes(rng: random.Random, raw: bytes) -> tuple[str, bytes]:
    data = bytearray(raw)
    kind = rng.choice(["flip", "cut", "insert", "splice", "encoding", "prefix"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "cut":
        data = data[: rng.randrange(len(data))]
    elif kind == "insert":
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == "splice":
        at, length = rng.randrange(len(data)), rng.randint(1, 40)
        data[at:at] = data[at:at + length] * rng.randint(2, 5)
    elif kind == "encoding":
        data = bytearray(raw.decode().encode(rng.choice(["utf-16", "utf-32", "utf-16-le"])))
    else:
        data[0:0] = rng.choice([b"\xef\xbb\xbf", b"\x00", b" \n", b"\xff\xfe", b"//", b")]}'\n"])
    return f"bytes:{kind}", bytes(data)


def special(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["empty", "null", "array", "string", "number", "bigint", "nesting", "not_utf8", "nan",
                       "whitespace", "object"])
    return f"special:{kind}", {
        "empty": b"", "null": b"null", "array": b"[]", "string": b'"run.admitted"', "number": b"1e999",
        "bigint": b"9" * 5000, "nesting": b'{"type": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "not_utf8": bytes(rng.randrange(128, 256) for _ in range(rng.randint(1, 300))),
        "nan": b'{"type": "run.admitted", "run_id": NaN}', "whitespace": b" \t\r\n" * 50, "object": b"{}",
    }[kind]


def hostile_key(rng: random.Random, honest: bytes | None) -> bytes | None:
    if rng.random() < 0.01:
        return b"k" * 20_000
    return rng.choice([honest, honest, None, b"", b"\xff\xfe\x00", odd_text(rng).encode("utf-8", "replace")])


def hostile_headers(rng: random.Random, honest: str | None, types: Sequence[str]) -> tuple[tuple[str, bytes], ...]:
    """The ``type`` and ``traceparent`` headers: missing, honest, garbage, another type,
    duplicated, huge or not UTF-8, independently; sometimes an unknown header beside."""
    headers: list[tuple[str, bytes]] = []
    type_choice = "huge" if rng.random() < 0.01 else rng.choice(
        ["missing", "honest", "honest", "garbage", "other", "twice", "not_utf8"])
    if type_choice == "honest" and honest:
        headers.append(("type", honest.encode()))
    elif type_choice == "garbage":
        headers.append(("type", odd_text(rng).encode("utf-8", "replace")))
    elif type_choice == "other":
        headers.append(("type", rng.choice(types).encode()))
    elif type_choice == "twice":
        headers += [("type", rng.choice(types).encode()), ("type", (honest or "x").encode())]
    elif type_choice == "huge":
        headers.append(("type", b"t" * 16_000))
    elif type_choice == "not_utf8":
        headers.append(("type", b"\xff\xfe\xc3\x28"))
    trace_choice = "huge" if rng.random() < 0.01 else rng.choice(
        ["missing", "valid", "garbage", "twice", "not_utf8", "zeros"])
    if trace_choice == "valid":
        headers.append(("traceparent", TRACEPARENT))
    elif trace_choice == "garbage":
        headers.append(("traceparent", odd_text(rng).encode("utf-8", "replace")))
    elif trace_choice == "twice":
        headers += [("traceparent", TRACEPARENT), ("traceparent", b"ff-" + b"0" * 52)]
    elif trace_choice == "huge":
        headers.append(("traceparent", b"00-" + b"a" * 16_000))
    elif trace_choice == "not_utf8":
        headers.append(("traceparent", b"\xc3\x28\xa0\xa1"))
    elif trace_choice == "zeros":
        headers.append(("traceparent", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01"))
    if rng.random() < 0.1:
        headers.append((odd_text(rng).encode("utf-8", "replace").decode(), odd_text(rng).encode("utf-8", "replace")))
    rng.shuffle(headers)
    return tuple(headers)


def honest(message: Message) -> Record:
    """A valid message as a producer sends it: its key and its ``type`` header."""
    key = getattr(message, "key", None)
    return Record(key.encode() if isinstance(key, str) else None, encode(message), (("type", message.type.encode()),),
                  message.type, valid=True)


FIXED = {"event_id": lambda i: str(uuid.UUID(int=i + 1)), "occurred_at": lambda i: "2026-01-01T00:00:00Z",
         "committed_at": lambda i: "2026-01-01T00:00:00Z", "receipt_id": lambda i: f"rcpt-{i}", "log_position": lambda i: i + 1}
"""What differs between two builds of the same seed message (ids, clocks, counters)."""


def fixed(body: Any, index: int) -> Any:
    """A seed's body with its ids and clocks fixed, so the same seed makes the same bytes."""
    if isinstance(body, dict):
        return {k: FIXED[k](index) if k in FIXED else fixed(v, index) for k, v in body.items()}
    return [fixed(v, index) for v in body] if isinstance(body, list) else body


def barrage(seed: int, seeds: Sequence[Message], valid: Sequence[Message], n: int, *, types: Sequence[str],
            oversized: int = 2) -> list[Record]:
    """``n`` records: ``valid`` spread evenly among hostile ones made from ``seeds`` (valid
    messages of the topic, never the ones whose effect is checked), ``oversized`` of them
    over the transport cap. ``types``: every message type of the contract (for wrong ones)."""
    rng = random.Random(seed)
    bodies = [(m.type, fixed(json.loads(encode(m)), index), getattr(m, "key", None)) for index, m in enumerate(seeds)]
    hostile = n - len(valid)
    out: list[Record] = []
    for i in range(hostile):
        kind_of, body, key = rng.choice(bodies)
        roll = rng.random()
        if i < oversized:
            kind, value = "oversized", json.dumps({**body, "x_pad": "y" * (TRANSPORT_CAP_BYTES + 1024)}).encode()
        elif roll < 0.55:
            kind, mutated = mutate_fields(rng, json.loads(json.dumps(body)), types)
            value = (mutated if isinstance(mutated, str) else json.dumps(mutated)).encode("utf-8", "surrogatepass")
        elif roll < 0.85:
            kind, value = mutate_bytes(rng, json.dumps(body).encode())
        elif roll < 0.95:
            kind, value = special(rng)
        else:  # a valid message with hostile key and headers only
            kind, value = "headers_only", json.dumps(body).encode()
        out.append(Record(hostile_key(rng, key.encode() if isinstance(key, str) else None), value,
                          hostile_headers(rng, kind_of, types), kind))
    step = max(len(out) // max(len(valid), 1), 1)
    for index, message in enumerate(valid):
        out.insert(min(index * (step + 1) + rng.randrange(step), len(out)), honest(message))
    return out

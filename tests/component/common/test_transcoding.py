"""The stores read their stored JSON with pydantic-core's parser (issue 9: the library's
``object_hook`` decoder was a fifth of a replay's decode): whatever the bytes, the result
is the library transcoder's, value for value and type for type, or its own error."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, JSONTranscoder as LibraryTranscoder, UUIDAsHex
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.transcoding import JSONTranscoder


def transcoders() -> tuple[LibraryTranscoder, JSONTranscoder]:
    pair = LibraryTranscoder(), JSONTranscoder()
    for transcoder in pair:
        for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
            transcoder.register(transcoding)
    return pair


LIBRARY, FAST = transcoders()


def typed(value: Any) -> Any:
    """Values with their types, so that 1 and 1.0 or a str and a UUID never compare equal."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def same_reading(data: bytes) -> None:
    try:
        expected = typed(LIBRARY.decode(data))
    except Exception as error:  # noqa: BLE001 — the library's refusal is the expected result
        with pytest.raises(type(error)):
            FAST.decode(data)
        return
    assert typed(FAST.decode(data)) == expected


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(),
                    st.uuids(), st.decimals(allow_nan=False, allow_infinity=False),
                    st.datetimes(timezones=st.just(UTC)))
states = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


@pytest.mark.rule("R1")
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), states, max_size=6))
def test_every_state_the_library_writes_reads_back_the_same(state: dict[str, Any]) -> None:
    data = LIBRARY.encode(state)
    same_reading(data)
    assert FAST.decode(data) == state


@pytest.mark.rule("R1")
@pytest.mark.parametrize("data", [
    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-02T07:54:15.266472+00:00"},"run_id":"r"}',
    b'{"a":{"_type_":"uuid_hex","_data_":"' + uuid.uuid4().hex.encode() + b'"},"b":[{"_type_":"decimal_str","_data_":"1.5"}]}',
    b'{"timestamp":{"_type_":"decimal_str","_data_":"1"},"b":{"_type_":"decimal_str","_data_":"2"}}',
    b'{"timestamp":{"_type_":"decimal_str","_data_":["1"]},"b":1}',  # a timestamp whose data is no plain value
    b'{"timestamp":"_type_"}',
    b'{"name":"_type_","x":1}',  # the key's bytes as a string value: counted, not decoded
    b'{"_type_":"decimal_str","_data_":"2.5"}',  # the whole state transcoded
    b'{"a":{"_type_":"decimal_str","_data_":"1","extra":1}}',  # three keys: not a transcoded object
    b'{"a":{"_type_":"decimal_str"}}',
    b'{"a":{"_data_":"1","other":"x"}}',
    b'{"a":{"_type_":"nope","_data_":"1"}}',  # an unknown transcoding: the library's error
    b'{"a":"\\ud800"}',  # a lone surrogate escape
    b'{"a":1e999,"b":NaN,"c":-Infinity}',
    b'{"a":123456789012345678901234567890}',
    b'{"a":1,"a":2}',
    b'\xff\xfe',
    b'{"a":',
    b'[1,2,{"_type_":"decimal_str","_data_":"3"}]',
    json.dumps({"t": {"_type_": "datetime_iso", "_data_": datetime(2026, 1, 1, tzinfo=UTC).isoformat()},
                "deep": {"x": [{"_type_": "decimal_str", "_data_": str(Decimal("0.1"))}]}}).encode(),
])
def test_edge_cases_read_as_the_library_reads_them(data: bytes) -> None:
    same_reading(data)

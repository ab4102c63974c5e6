"""The canonical JSON behind every hash (R1's view hash, D3's frame hashes, P11's
fingerprints) is the standard library's text, byte for byte, whoever writes it
(issue 9: orjson writes it where it writes the same bytes, the standard library
elsewhere): a hash taken before the change is the hash taken after it."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imprint.canonical import _may_differ, canonical_bytes, canonical_json, canonical_sha256, sha256_hex


def standard(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def same_text(value: Any) -> None:
    try:
        expected = standard(value)
    except TypeError:  # the standard library's refusal is the expected result
        with pytest.raises(TypeError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected
    assert canonical_json(value) == expected.decode("utf-8", "surrogatepass")
    assert canonical_sha256(value) == sha256_hex(expected.decode("utf-8", "surrogatepass"))


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=-1e-3, max_value=1e-3),
                    st.text(), st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010)))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=8), inner, max_size=4),
    st.dictionaries(st.integers(-3, 3), inner, max_size=3)), max_leaves=24)


@pytest.mark.rule("R1")
@pytest.mark.rule("D3")
@settings(max_examples=600, deadline=None)
@given(values)
def test_canonical_json_is_the_standard_librarys_text_for_any_value(value: Any) -> None:
    same_text(value)


@pytest.mark.rule("R1")
@pytest.mark.parametrize("value", [
    1e-7, 2.5e-5, -1e-5, 1e-4, 5e-324, 1e16, 1e22, 123456789012345678.0, -0.0, [-3e-9], {"a": [1, -7.5e-06]},
    2**64, -2**63 - 1, "\ud800", {2: "a", 1: "b"}, {1: "a", "1": "b"}, {"k": "null 3e-5 0.00001"}, {"id": "1e-5"},
    {"b": [1, {"z": None, "a": "\u2028\x7f\x1f"}], "a": ("t", True)}, {"\U0001F600": 1, "\uffff": 2, "é": 3},
], ids=repr)
def test_values_where_orjson_and_the_standard_library_part_are_written_as_the_standard_librarys(value: Any) -> None:
    same_text(value)


@pytest.mark.rule("R1")
def test_a_committed_blocks_view_is_written_by_orjson_and_reads_as_the_standard_librarys() -> None:
    receipt = {"receipt_id": "3ae75f49-ed1e-5675-b1af-c344859871e0", "block_id": "blk_1e-2", "revision": 2,
               "log_position": 8, "committed_at": "2026-12-02T12:37:31.893183+00:00"}
    block = {"block_id": "blk_1e-2", "revision": 2,
             "content": {"type": "text", "markdown": "Revenue rose 3 % — «ok»\n"},
             "citations": [{"source_id": "src:1", "status": "valid"}],
             "numbers": [{"handle_id": "h", "rendered": "41.5 %", "version": 1}], "hints": [], "truncated": False,
             "receipt": receipt}
    view = {"view_version": 1, "run_id": "r", "blocks": [block] * 3, "withheld": []}
    same_text(view)
    assert not _may_differ(orjson.dumps(view, option=orjson.OPT_SORT_KEYS))  # hex ids do not look like floats


@pytest.mark.rule("R1")
def test_nan_and_the_infinities_which_json_lacks_are_written_as_null() -> None:
    assert canonical_json({"a": [float("nan"), float("inf"), -float("inf")]}) == '{"a":[null,null,null]}'


def test_a_value_neither_writer_can_write_is_refused() -> None:
    with pytest.raises(TypeError):
        canonical_json({"when": object()})

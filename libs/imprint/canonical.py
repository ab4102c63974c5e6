"""Canonical JSON and its SHA-256: the one definition behind every hash taken over a
JSON value — a replayed answer view's hash (R1), a frame payload's ``body_sha256``
(D3) and a revision's fingerprint (P-rules on duplicates).

Canonical means sorted keys, no whitespace, UTF-8 without escapes; the same value
gives the same text in any process and on any day, which is all a hash over it needs.
A lone surrogate is encoded as is (``surrogatepass``) rather than refused: hashing a
value never fails on text that was accepted.

The definition is the standard library's ``json.dumps(value, sort_keys=True,
ensure_ascii=False, separators=(",", ":"))``. orjson writes the same bytes at a fraction of
the cost (a replay hashes every view), except where the two differ:

* orjson refuses a lone surrogate, an integer beyond 64 bits or a key that is not a
  string; the standard library writes them, and its text is used;
* it writes a float below 1e-4 in another form (``1e-7`` for ``1e-07``, ``0.00001``
  for ``1e-05``). Such a number shows in orjson's text as ``0.0000`` or as digits
  followed by ``e-`` right after a ``:``, ``,`` or ``[``; where either is seen (even
  inside a string, where it is harmless) the standard library's text is used;
* NaN and the infinities, which are not JSON, are written as ``null`` (as pydantic's
  JSON mode and JavaScript do), where the standard library wrote ``NaN`` and
  ``Infinity``. No hashed value holds one: they are pydantic JSON dumps of blocks and
  frames, with no float fields.

``tests/unit/common/test_canonical.py`` checks the equality over generated values."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

_NUMBER = frozenset(b"0123456789.")
_BEFORE_A_VALUE = frozenset(b":,[")


def _may_differ(text: bytes) -> bool:
    """Whether orjson's ``text`` may hold a float it writes unlike the standard library."""
    if b"0.0000" in text:
        return True
    at = text.find(b"e-")
    while at != -1:
        start = at
        while start and text[start - 1] in _NUMBER:
            start -= 1
        if start < at:
            if start and text[start - 1] == 45:  # "-": a negative number, or a word with a hyphen
                start -= 1
            if start == 0 or text[start - 1] in _BEFORE_A_VALUE:
                return True
        at = text.find(b"e-", at + 2)
    return False


def canonical_bytes(value: Any, *, floats: bool = True) -> bytes:
    """``value``'s canonical JSON, UTF-8 encoded (lone surrogates passed through).
    ``floats=False``: the caller knows ``value`` holds no float (the JSON of a model without
    a float field), so orjson's text is not searched for one."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    else:
        if not floats or not _may_differ(text):
            return text
    return _standard(value).encode("utf-8", "surrogatepass")


def canonical_json(value: Any, *, floats: bool = True) -> str:
    return canonical_bytes(value, floats=floats).decode("utf-8", "surrogatepass")


def _standard(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_sha256(value: Any) -> str:
    """SHA-256 hex of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()

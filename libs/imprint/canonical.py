"""Canonical JSON and its SHA-256: the one definition behind every hash taken over a
JSON value — a replayed answer view's hash (R1), a frame payload's ``body_sha256``
(D3) and a revision's fingerprint (P-rules on duplicates).

Canonical means sorted keys, no whitespace, UTF-8 without escapes; the same value
gives the same text in any process and on any day, which is all a hash over it needs.
A lone surrogate is encoded as is (``surrogatepass``) rather than refused: hashing a
value never fails on text that was accepted."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_sha256(value: Any) -> str:
    """SHA-256 hex of ``value``'s canonical JSON."""
    return sha256_hex(canonical_json(value))

"""X9 — bounded diagnostic traces that structurally cannot carry private text.

A trace is at most :data:`MAX_ENTRIES` entries; each entry renders to at most
:data:`MAX_ENTRY_CHARS` characters. An entry holds only

* ``code`` — a lowercase slug (``[a-z0-9_.:-]``, ≤ 64): *what* happened;
* ``ref`` — an identifier (``[A-Za-z0-9_.:#/-]``, ≤ 120, no spaces): *which* thing;
* ``count`` — an integer, ``millis`` — a duration.

There is no free-text field: a question, an answer, an evidence body or a provider
envelope has spaces, punctuation or length that the patterns refuse, so it
cannot be put into a trace by mistake. (A single opaque token still fits a
``ref`` — callers pass identifiers, never content.) When a trace is full, later
entries are counted, not stored: the last slot becomes ``trace.truncated`` with
the number of dropped entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

MAX_ENTRIES: Final = 64
MAX_ENTRY_CHARS: Final = 200
_CODE = re.compile(r"^[a-z0-9_.:-]{1,64}$")
_REF = re.compile(r"^[A-Za-z0-9_.:#/-]{1,120}$")


class DiagnosticRefused(ValueError):
    """The value is not a code, an identifier, a count or a duration."""


@dataclass(frozen=True)
class DiagnosticEntry:
    code: str
    ref: str | None = None
    count: int | None = None
    millis: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not _CODE.fullmatch(self.code):
            raise DiagnosticRefused("code must be a lowercase slug of at most 64 characters")
        if self.ref is not None and (not isinstance(self.ref, str) or not _REF.fullmatch(self.ref)):
            raise DiagnosticRefused("ref must be an identifier without spaces, at most 120 characters")
        if self.count is not None and (isinstance(self.count, bool) or not isinstance(self.count, int)):
            raise DiagnosticRefused("count must be an integer")
        if self.millis is not None and (isinstance(self.millis, bool) or not isinstance(self.millis, (int, float))):
            raise DiagnosticRefused("millis must be a number")
        if len(self.render()) > MAX_ENTRY_CHARS:  # cannot happen with the patterns above; kept as the contract
            raise DiagnosticRefused("entry over the size bound")

    def render(self) -> str:
        parts = [self.code]
        if self.ref is not None:
            parts.append(f"ref={self.ref}")
        if self.count is not None:
            parts.append(f"n={self.count}")
        if self.millis is not None:
            parts.append(f"ms={self.millis:.1f}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in (("code", self.code), ("ref", self.ref), ("count", self.count), ("millis", self.millis)) if v is not None}


@dataclass
class DiagnosticTrace:
    """An append-only, bounded list of :class:`DiagnosticEntry`."""

    entries: list[DiagnosticEntry] = field(default_factory=list)
    dropped: int = 0

    def add(self, code: str, ref: str | None = None, count: int | None = None, millis: float | None = None) -> None:
        entry = DiagnosticEntry(code, ref, count, millis)  # validates even when it will be dropped
        if len(self.entries) < MAX_ENTRIES - 1:
            self.entries.append(entry)
        else:
            self.dropped += 1

    def render(self) -> list[str]:
        lines = [e.render() for e in self.entries]
        if self.dropped:
            lines.append(DiagnosticEntry("trace.truncated", count=self.dropped).render())
        return lines

    def as_dicts(self) -> list[dict[str, object]]:
        out = [e.as_dict() for e in self.entries]
        if self.dropped:
            out.append(DiagnosticEntry("trace.truncated", count=self.dropped).as_dict())
        return out

    def __len__(self) -> int:
        return len(self.entries) + (1 if self.dropped else 0)

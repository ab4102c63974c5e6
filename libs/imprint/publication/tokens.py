"""The three inline tokens a model may write (SPEC §2), parsed in one place.

``[[cite:<full source id>]]`` binds a citation (P7), ``[[num:<handle id>]]`` asks
for a Host-issued value (P9), ``[[ref:<block id>]]`` says the block builds on
another (P21). The id is taken verbatim: no trimming, no case folding, so a
truncated or guessed id stays what it is and simply resolves to nothing.
Anything that does not match exactly (``[[CITE:x]]``, ``[[cite:x]``, nested
brackets) is ordinary text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Literal

TokenKind = Literal["cite", "num", "ref"]

MAX_TOKEN_ID_CHARS = 200
"""Same bound as a wire ``Identifier``."""

TOKEN_PATTERN = re.compile(
    r"\[\[(cite|num|ref):([^\[\]\x00-\x1f\x7f]{1,%d})\]\]" % MAX_TOKEN_ID_CHARS
)


@dataclass(frozen=True, slots=True)
class Token:
    """One complete token found in a text, with its span."""

    kind: TokenKind
    id: str
    start: int
    end: int

    @property
    def text(self) -> str:
        return f"[[{self.kind}:{self.id}]]"


def scan(text: str) -> Iterator[Token]:
    """Every complete token in ``text``, in order of appearance."""
    for match in TOKEN_PATTERN.finditer(text):
        yield Token(match.group(1), match.group(2), match.start(), match.end())  # type: ignore[arg-type]


def ids_of(text: str, kind: TokenKind) -> list[str]:
    """Distinct ids of one kind, first occurrence first."""
    seen: dict[str, None] = {}
    for token in scan(text):
        if token.kind == kind:
            seen.setdefault(token.id, None)
    return list(seen)


def token(kind: TokenKind, id_: str) -> str:
    """The literal text of a token (for tests and for building bodies)."""
    return f"[[{kind}:{id_}]]"

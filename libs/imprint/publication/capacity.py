"""P5: capacity.

Display text over the limit (default 60,000 characters) keeps a bounded
readable prefix plus an explicit :data:`TRUNCATION_MARKER`, and is flagged
``truncated``. The text is handled as pieces: plain text may be cut anywhere
(preferably at a line or word break near the limit); a token or a rendered
value is atomic and is either kept whole or dropped whole. The result,
marker included, never exceeds the limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from imprint.publication.tokens import scan

TRUNCATION_MARKER = "\n\n[… truncated]"
BREAK_WINDOW = 200
"""How far back from the cut a line or word break is looked for."""


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    atomic: bool = False
    binding: Any = None
    """The token or rendered value that produced an atomic piece."""


@dataclass(frozen=True, slots=True)
class Fitted:
    pieces: tuple[Piece, ...]
    truncated: bool

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)


def fit(pieces: Sequence[Piece], limit: int) -> Fitted:
    total = sum(len(piece.text) for piece in pieces)
    if total <= limit:
        return Fitted(tuple(pieces), False)
    budget = limit - len(TRUNCATION_MARKER)
    kept: list[Piece] = []
    used = 0
    for piece in pieces:
        room = budget - used
        if len(piece.text) <= room:
            kept.append(piece)
            used += len(piece.text)
            continue
        if not piece.atomic and room > 0:
            kept.append(Piece(_cut(piece.text, room)))
        break
    while kept and not kept[-1].atomic and kept[-1].text == "":
        kept.pop()
    kept.append(Piece(TRUNCATION_MARKER))
    return Fitted(tuple(kept), True)


def _cut(text: str, room: int) -> str:
    head = text[:room]
    floor = max(0, room - BREAK_WINDOW)
    for separator in ("\n", " "):
        at = head.rfind(separator, floor)
        if at > 0:
            return head[:at]
    return head


def pieces_of(text: str) -> list[Piece]:
    """Split text into plain pieces and atomic token pieces (no rendering)."""
    pieces: list[Piece] = []
    position = 0
    for token in scan(text):
        if token.start > position:
            pieces.append(Piece(text[position:token.start]))
        pieces.append(Piece(token.text, atomic=True, binding=token))
        position = token.end
    if position < len(text):
        pieces.append(Piece(text[position:]))
    return pieces


def fit_text(text: str, limit: int) -> Fitted:
    return fit(pieces_of(text), limit)

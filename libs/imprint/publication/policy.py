"""The tunable limits of Publication, as one value object."""

from __future__ import annotations

from dataclasses import dataclass

from imprint.contracts.registry import TRANSPORT_CAP_BYTES

DISPLAY_CHAR_LIMIT = 60_000
"""P5: display text over this many characters is truncated."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Limits one settlement applies. Defaults are the rules' (P3, P5, P13)."""

    modifications_per_block: int = 2
    """P13: committed (or previewed) modifications one block may receive."""
    modifications_per_run: int = 8
    """P13: modifications one run may make over all its blocks."""
    display_char_limit: int = DISPLAY_CHAR_LIMIT
    """P5: characters of display text, truncation marker included."""
    transport_cap_bytes: int = TRANSPORT_CAP_BYTES
    """P3: the envelope size intake refuses above."""
    blocks_per_candidate: int = 64
    """Blocks of one ``send_answer_part`` settled one by one; the rest are
    rejected together, as one ``malformed_block`` decision at this index (a
    1 MiB envelope could carry tens of thousands of empty blocks)."""

    def __post_init__(self) -> None:
        if self.modifications_per_block < 0 or self.modifications_per_run < 0:
            raise ValueError("modification quotas cannot be negative")
        if self.display_char_limit < 64:
            raise ValueError("display_char_limit must leave room for a readable prefix and the marker")
        if self.blocks_per_candidate < 1:
            raise ValueError("blocks_per_candidate must be at least 1")


DEFAULT_POLICY = Policy()

"""P18: position.

``delivery_ordinal`` is assigned at a block's first commit, increases within a
run, and is kept by every revision: a revision replaces the block in place."""

from __future__ import annotations

from imprint.publication.facts import BlockRecord


def ordinal_for(target: BlockRecord | None, next_ordinal: int) -> int:
    """The target's ordinal for a revision; the run's next one for a new block."""
    return target.ordinal if target is not None else next_ordinal


def advance(next_ordinal: int, assigned: int) -> int:
    return max(next_ordinal, assigned + 1)

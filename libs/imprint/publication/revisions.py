"""P12: revisions keep their identity.

``replaces`` must name a block id the Host issued for this run that is
currently live (committed, not withdrawn). Anything else — an id from another
run, a guessed or misspelled id, a withdrawn block, a rejected block that never
got an id, a non-string — is ``invalid_target``: the attempt keeps its identity
as a modification and is rejected; it is never turned into a new block, and the
body it aimed at is untouched. ``replaces`` absent, ``null`` or ``""`` means
"new block"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from imprint.publication.extraction import clean
from imprint.publication.facts import BlockRecord

MAX_TARGET_CHARS = 200


@dataclass(frozen=True, slots=True)
class InvalidTarget:
    target: str
    detail: str


def target_text(replaces: Any) -> str:
    """``replaces`` as it can be shown back in ``answer.revision_rejected``."""
    text = replaces if isinstance(replaces, str) else json.dumps(replaces, ensure_ascii=False, default=str)
    return clean(text)[:MAX_TARGET_CHARS]


def resolve_target(replaces: Any, lookup: Callable[[str], BlockRecord | None]) -> BlockRecord | InvalidTarget:
    if not isinstance(replaces, str):
        return InvalidTarget(target_text(replaces), f"replaces is a {type(replaces).__name__}")
    record = lookup(replaces)
    if record is None:
        return InvalidTarget(target_text(replaces), "not a block this run issued")
    if not record.live:
        return InvalidTarget(target_text(replaces), "block is withdrawn")
    return record

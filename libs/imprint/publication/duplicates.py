"""P11: exact duplicates only.

A prepared block is ``unchanged`` only if its body is byte-identical
(whitespace counts), its source and dependency bindings and hints are the
same, and current authorization passed again — :func:`settle` asks this only
after the block passed every source check under today's standing, so after a
revocation an identical body is rejected, never waved through. Then the
original receipt is reused: no revision, no publication, no quota.

Everything that was decided about the revision goes into its
:func:`fingerprint`; similar text is simply a different fingerprint. A
modification is compared with its target only; a new block with any live block
of the run (the same text through entry A and entry B is one block)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from imprint.canonical import canonical_sha256
from imprint.publication.facts import BlockRecord

FINGERPRINT_FIELDS = (
    "role", "citations", "numbers", "depends_on",
    "source_hint", "effective_sources", "hints", "truncated", "body_sha256",
)


def fingerprint(view: Mapping[str, Any], labels: tuple[str, ...] | list[str] = ()) -> str:
    """Digest of everything a revision binds; ``view`` is a JSON-shaped BlockView.
    Identity and position (block_id, revision, ordinal, candidate) are left out;
    the body enters through ``body_sha256`` (the exact bytes) and its content type."""
    bound = {name: view.get(name) for name in FINGERPRINT_FIELDS}
    content = view.get("content") or {}
    bound["content_type"] = content.get("type")
    bound["labels"] = list(labels)
    return canonical_sha256(bound)


def find_duplicate(
    candidate_fingerprint: str,
    target: BlockRecord | None,
    fingerprints: Mapping[str, str],
    lookup: Callable[[str], BlockRecord | None],
) -> BlockRecord | None:
    """The committed, live revision this prepared block repeats exactly, if any."""
    if target is not None:
        if target.live and target.receipt is not None and target.fingerprint == candidate_fingerprint:
            return target
        return None
    block_id = fingerprints.get(candidate_fingerprint)
    if block_id is None:
        return None
    record = lookup(block_id)
    if record is None or not record.live or record.receipt is None or record.fingerprint != candidate_fingerprint:
        return None
    return record

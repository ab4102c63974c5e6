"""Host-issued block ids.

A block id is derived from (run_id, candidate_id, block index), so a redelivered
candidate yields the same ids and nothing the model writes can choose one. A
modification keeps the id of the block it replaces (P12); only a block's first
commit issues an id."""

from __future__ import annotations

import hashlib

BLOCK_ID_PREFIX = "blk_"
_DOMAIN = b"imprint.publication.block_id.v1\x1f"


def issue_block_id(run_id: str, candidate_id: str, block_index: int) -> str:
    """``blk_`` + 32 hex digits of a SHA-256 over the origin (stable, unguessable
    without knowing the run and candidate identities)."""
    name = f"{run_id}\x1f{candidate_id}\x1f{block_index}".encode("utf-8", "surrogatepass")
    return BLOCK_ID_PREFIX + hashlib.sha256(_DOMAIN + name).hexdigest()[:32]


def looks_issued(block_id: str) -> bool:
    """Shape check only; whether this run issued it is the run's knowledge."""
    return block_id.startswith(BLOCK_ID_PREFIX) and len(block_id) == len(BLOCK_ID_PREFIX) + 32

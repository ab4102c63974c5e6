"""Host-issued block ids.

A block id is derived from (run_id, candidate_id, block index), so a redelivered
candidate yields the same ids and nothing the model writes can choose one. A
modification keeps the id of the block it replaces (P12); only a block's first
commit issues an id."""

from __future__ import annotations

import uuid

BLOCK_ID_NAMESPACE = uuid.UUID("6a1f5b0e-3c7d-5e9a-9b2f-1d4c8e7a0b13")
BLOCK_ID_PREFIX = "blk_"


def issue_block_id(run_id: str, candidate_id: str, block_index: int) -> str:
    name = f"{run_id}\x1f{candidate_id}\x1f{block_index}"
    return BLOCK_ID_PREFIX + uuid.uuid5(BLOCK_ID_NAMESPACE, name).hex


def looks_issued(block_id: str) -> bool:
    """Shape check only; whether this run issued it is the run's knowledge."""
    return block_id.startswith(BLOCK_ID_PREFIX) and len(block_id) == len(BLOCK_ID_PREFIX) + 32

"""P13: modification quota.

At most ``Policy.modifications_per_block`` (2) modifications per block and
``Policy.modifications_per_run`` (8) per run. New blocks and exact duplicates
are free. Quota is a fact of its own, keyed by (candidate, block index): a
modification shown as a preview has consumed quota even if its commit later
fails, and the same candidate retried is counted once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from imprint.publication.policy import Policy


def quota_key(candidate_id: str, block_index: int) -> str:
    return f"{candidate_id}#{block_index}"


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    detail: str


def check_quota(
    block_id: str,
    key: str,
    *,
    consumed: Mapping[str, str] | set[str],
    block_modifications: int,
    run_modifications: int,
    policy: Policy,
) -> QuotaExceeded | None:
    """``None`` when the modification may proceed. A key already consumed has
    paid already (a previewed modification, or a retry)."""
    if key in consumed:
        return None
    if block_modifications >= policy.modifications_per_block:
        return QuotaExceeded(f"block {block_id} has {block_modifications} modifications")
    if run_modifications >= policy.modifications_per_run:
        return QuotaExceeded(f"run has {run_modifications} modifications")
    return None

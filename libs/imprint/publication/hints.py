"""P10: source hints belong to the block revision.

``sources_verified``: every citation is valid. ``sources_partial``: some are.
``sources_unverified``: none are, or none were given. A hint describes one
block revision; it never says anything about the run (it never marks a run
interrupted). A committed hint is bound to (block_id, revision, body_sha256):
read through :func:`read_hint`, a record without a hint (legacy) or whose
binding does not match reads as ``unknown`` — never as clean.

The effective source set is tri-state in the same spirit: ``()`` is a set
verified to be empty, a known fact; ``None`` is unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, get_args

from imprint.contracts.publication import BlockHint, SourceHint

KNOWN_HINTS: frozenset[str] = frozenset(get_args(SourceHint)) - {"unknown"}
BLOCK_HINT_ORDER: tuple[str, ...] = get_args(BlockHint)


def source_hint(valid: int, total: int) -> SourceHint:
    """From the number of distinct valid citations among all distinct citations."""
    if total == 0 or valid == 0:
        return "sources_unverified"
    if valid == total:
        return "sources_verified"
    return "sources_partial"


@dataclass(frozen=True, slots=True)
class HintBinding:
    block_id: str
    revision: int
    body_sha256: str

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> HintBinding | None:
        try:
            return cls(str(record["block_id"]), int(record["revision"]), str(record["body_sha256"]))
        except (KeyError, TypeError, ValueError):
            return None


def read_hint(record: Mapping[str, Any], expected: HintBinding) -> SourceHint:
    """The hint of a stored block revision, if and only if it is bound to the
    revision the reader holds. Missing, unknown or mismatched → ``unknown``."""
    hint = record.get("source_hint")
    if hint not in KNOWN_HINTS:
        return "unknown"
    if HintBinding.of(record) != expected:
        return "unknown"
    return hint  # type: ignore[return-value]


def block_hints(hints: Iterable[str]) -> list[BlockHint]:
    """Distinct block hints in the contract's order."""
    present = set(hints)
    return [hint for hint in BLOCK_HINT_ORDER if hint in present]  # type: ignore[misc]


EffectiveSources = tuple[str, ...] | None


def known_sources(source_ids: Iterable[str]) -> tuple[str, ...]:
    """A known effective source set (possibly verified empty)."""
    return tuple(sorted(set(source_ids)))


def union_sources(*sets: EffectiveSources) -> EffectiveSources:
    """Unknown if any part is unknown; otherwise the sorted union."""
    if any(part is None for part in sets):
        return None
    return known_sources(source for part in sets for source in part)  # type: ignore[union-attr]


def describe_sources(sources: EffectiveSources) -> Literal["unknown", "verified_empty", "known"]:
    if sources is None:
        return "unknown"
    return "verified_empty" if len(sources) == 0 else "known"

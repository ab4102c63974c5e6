"""What one run knows when it settles a candidate: the read side of
:class:`~imprint.publication.run.PublicationRun`, as typed values.

The aggregate keeps plain JSON-shaped dicts (so eventsourcing can transcode
events and snapshots); :class:`RunFacts` presents them as typed records, built
lazily, without copying the run's state on every settlement."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Generic, Iterator, Literal, Mapping, TypeVar

Scope = Literal["public", "private"]

V = TypeVar("V")


class FlatRecord:
    """A record the run keeps as a flat dict of its fields, as they are (no container to copy)."""

    __slots__ = ()

    def to_state(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Grant(FlatRecord):
    """``evidence.granted``: this run may cite ``source_id`` (P7)."""

    source_id: str
    scope: Scope
    owner_account_id: str
    title: str = ""

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Grant:
        return cls(state["source_id"], state["scope"], state["owner_account_id"], state.get("title", ""))


@dataclass(frozen=True, slots=True)
class NumericValue(FlatRecord):
    """``numeric.issued`` at its latest version (P9). ``value`` is the decimal string."""

    handle_id: str
    value: str
    unit: str
    version: int
    source_id: str | None = None

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> NumericValue:
        return cls(state["handle_id"], state["value"], state.get("unit", ""), state["version"], state.get("source_id"))


@dataclass(frozen=True, slots=True)
class BlockRecord:
    """A block this run issued, at its current revision."""

    block_id: str
    revision: int
    ordinal: int
    candidate_id: str
    fingerprint: str
    body_sha256: str
    source_hint: str
    effective_sources: tuple[str, ...] | None
    """``()`` is verified empty; ``None`` is unknown (P10)."""
    depends_on: tuple[str, ...] = ()
    receipt: Mapping[str, Any] | None = None
    """``{receipt_id, log_position, committed_at}``; ``None`` while not yet committed."""
    withdrawn: Mapping[str, Any] | None = None
    """``{cause, source_id}`` once withdrawn (P21); the block is then not live."""

    @property
    def live(self) -> bool:
        return self.withdrawn is None

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> BlockRecord:
        effective = state.get("effective_sources")
        return cls(
            block_id=state["block_id"],
            revision=state["revision"],
            ordinal=state["ordinal"],
            candidate_id=state["candidate_id"],
            fingerprint=state["fingerprint"],
            body_sha256=state["body_sha256"],
            source_hint=state.get("source_hint", "unknown"),
            effective_sources=None if effective is None else tuple(effective),
            depends_on=tuple(state.get("depends_on", ())),
            receipt=state.get("receipt"),
            withdrawn=state.get("withdrawn"),
        )

    def to_state(self) -> dict[str, Any]:
        return {
            "block_id": self.block_id,
            "revision": self.revision,
            "ordinal": self.ordinal,
            "candidate_id": self.candidate_id,
            "fingerprint": self.fingerprint,
            "body_sha256": self.body_sha256,
            "source_hint": self.source_hint,
            "effective_sources": None if self.effective_sources is None else list(self.effective_sources),
            "depends_on": list(self.depends_on),
            "receipt": None if self.receipt is None else dict(self.receipt),
            "withdrawn": None if self.withdrawn is None else dict(self.withdrawn),
        }


class StateView(Mapping[str, V], Generic[V]):
    """A read-only typed view over a dict of JSON-shaped records."""

    __slots__ = ("_state", "_convert", "_cache")

    def __init__(self, state: Mapping[str, Any], convert: Callable[[Mapping[str, Any]], V]) -> None:
        self._state = state
        self._convert = convert
        self._cache: dict[str, V] = {}

    def __getitem__(self, key: str) -> V:
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = self._convert(self._state[key])
            return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __contains__(self, key: object) -> bool:
        return key in self._state


@dataclass(frozen=True, slots=True)
class RunFacts:
    """Everything :func:`~imprint.publication.settlement.settle` reads about a run."""

    run_id: str
    account_id: str | None = None
    grants: Mapping[str, Grant] = field(default_factory=dict)
    numerics: Mapping[str, NumericValue] = field(default_factory=dict)
    blocks: Mapping[str, BlockRecord] = field(default_factory=dict)
    fingerprints: Mapping[str, str] = field(default_factory=dict)
    """Fingerprint of a live block's current revision → its block id (P11)."""
    consumed: Mapping[str, str] = field(default_factory=dict)
    """Quota key (candidate#index) → block id of every modification that used quota (P13)."""
    block_modifications: Mapping[str, int] = field(default_factory=dict)
    run_modifications: int = 0
    next_ordinal: int = 1

    def live_block(self, block_id: str) -> BlockRecord | None:
        record = self.blocks.get(block_id)
        return record if record is not None and record.live else None

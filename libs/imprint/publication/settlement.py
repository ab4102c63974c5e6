"""Settlement: one candidate, block by block, as the seed's diagram draws it.

::

    proposal
      → check original source proof ──→ reject dependent effect
      → retain permitted body
      → degrade optional attachments
      → (optional preview)
      → commit attempt ──→ versioned receipt | save unknown

:func:`settle` is pure: it reads a run's :class:`~imprint.publication.facts.RunFacts`
and the sources' :class:`~imprint.publication.sources.SourceStanding`, and
returns one :data:`BlockDecision` per proposed block (P6: each block on its
own; a defect in one never sinks another). Committing the decisions —
receipt, log position, time — is the run aggregate's job; previews are built
from :class:`Commit` decisions before that (P14).

Order of checks for one block:

1. ``replaces`` → the target must be live in this run (P12) else ``invalid_target``.
2. extraction (P4) → ``empty_body`` / ``malformed_block``.
3. original source proof over the whole proposed body (P7, P8, P21): any
   citation or inherited source that exists but is not authorized →
   ``unauthorized_source``.
4. degrade attachments: unresolved citations dropped (P8), unavailable numbers
   marked (P9), invalid metadata and dangling dependencies dropped, capacity
   (P5). Bindings then describe the displayed text.
5. exact duplicate of a live revision → :class:`Unchanged` (P11).
6. modification quota (P13) → ``quota_exceeded``.
7. :class:`Commit` with revision (P12) and ordinal (P18)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from imprint.contracts.publication import (
    BlockView,
    Citation,
    Content,
    Receipt,
    RejectionReason,
    RenderedNumber,
    RevisionRejectionReason,
)
from imprint.publication.block_ids import issue_block_id
from imprint.publication.candidate import Candidate, ProposedBlock
from imprint.publication.capacity import Piece, fit
from imprint.publication.citations import Resolution, first_unauthorized, resolve_all, still_standing
from imprint.publication.dependencies import check_dependencies, effective_sources
from imprint.publication.duplicates import find_duplicate, fingerprint
from imprint.publication.extraction import NotExtractable, clean, extract, render_table
from imprint.publication.facts import BlockRecord, RunFacts
from imprint.publication.hints import block_hints, source_hint
from imprint.publication.numbers import RenderedValue, render
from imprint.publication.ordinals import advance, ordinal_for
from imprint.publication.policy import DEFAULT_POLICY, Policy
from imprint.publication.quota import check_quota, quota_key
from imprint.publication.revisions import InvalidTarget, resolve_target
from imprint.publication.sources import EMPTY_STANDING, SourceStanding
from imprint.publication.tokens import Token, scan


@dataclass(frozen=True, slots=True, eq=False)
class Commit:
    """A prepared block revision, ready to commit (and to preview)."""

    block_index: int
    block: BlockView
    is_modification: bool
    target: str | None
    quota_key: str | None
    fingerprint: str
    labels: tuple[str, ...] = ()
    state: Mapping[str, Any] = field(default_factory=dict)
    """``block`` JSON-shaped, as the commit event stores it."""

    @property
    def block_id(self) -> str:
        return self.block.block_id


@dataclass(frozen=True, slots=True)
class Unchanged:
    """An exact duplicate of a live revision: its receipt is reused (P11)."""

    block_index: int
    block_id: str
    revision: int
    receipt: Receipt


@dataclass(frozen=True, slots=True)
class Rejected:
    """The block is refused. ``reason`` is client-safe; ``detail`` stays internal."""

    block_index: int
    reason: RejectionReason
    detail: str
    block_id: str | None = None
    """The target's id when a modification was refused; ``None`` for a new block (no id was issued)."""


@dataclass(frozen=True, slots=True)
class RevisionRejected:
    """A modification refused as such: never turned into a new block (P12, P13)."""

    block_index: int
    target: str
    reason: RevisionRejectionReason
    detail: str = ""


BlockDecision = Union[Commit, Unchanged, Rejected, RevisionRejected]

DECISION_WORDS: dict[type, str] = {Commit: "commit", Unchanged: "unchanged", Rejected: "rejected",
                                   RevisionRejected: "revision_rejected"}
"""Each decision in one fixed word (what a trace says a candidate came to, X9)."""

INTERNAL_ERROR = "internal error while settling"


class _Ledger:
    """The run's facts plus what earlier blocks of the same candidate decided."""

    __slots__ = ("facts", "blocks", "modifications", "run_modifications", "next_ordinal", "consumed", "touched")

    def __init__(self, facts: RunFacts) -> None:
        self.facts = facts
        self.blocks: dict[str, BlockRecord] = {}
        self.modifications: dict[str, int] = {}
        self.run_modifications = facts.run_modifications
        self.next_ordinal = facts.next_ordinal
        self.consumed: set[str] = set()
        self.touched: set[str] = set()

    def lookup(self, block_id: str) -> BlockRecord | None:
        record = self.blocks.get(block_id)
        return record if record is not None else self.facts.blocks.get(block_id)

    def block_modifications(self, block_id: str) -> int:
        return self.modifications.get(block_id, self.facts.block_modifications.get(block_id, 0))

    def is_consumed(self, key: str) -> bool:
        return key in self.consumed or key in self.facts.consumed

    def record(self, decision: BlockDecision) -> None:
        if not isinstance(decision, Commit):
            return
        view = decision.block
        self.blocks[view.block_id] = BlockRecord(
            block_id=view.block_id,
            revision=view.revision,
            ordinal=view.delivery_ordinal,
            candidate_id=view.candidate_id,
            fingerprint=decision.fingerprint,
            body_sha256=view.body_sha256,
            source_hint=view.source_hint,
            effective_sources=None if view.effective_sources is None else tuple(view.effective_sources),
            depends_on=tuple(view.depends_on),
        )
        self.touched.add(view.block_id)
        self.next_ordinal = advance(self.next_ordinal, view.delivery_ordinal)
        if decision.quota_key is not None and not self.is_consumed(decision.quota_key):
            self.consumed.add(decision.quota_key)
            self.modifications[view.block_id] = self.block_modifications(view.block_id) + 1
            self.run_modifications += 1


def settle(
    candidate: Candidate,
    facts: RunFacts,
    standing: SourceStanding = EMPTY_STANDING,
    policy: Policy = DEFAULT_POLICY,
) -> tuple[BlockDecision, ...]:
    """One decision per proposed block, in order. Never raises for any body."""
    ledger = _Ledger(facts)
    source_ok = _memo(lambda source_id: still_standing(source_id, facts, standing))
    decisions: list[BlockDecision] = []
    blocks = candidate.blocks
    for proposed in blocks[: policy.blocks_per_candidate]:
        try:
            decision = _settle_block(candidate, proposed, ledger, standing, policy, source_ok)
        except Exception as error:  # noqa: BLE001 — a body must end in a typed outcome
            decision = Rejected(proposed.index, "malformed_block", f"{INTERNAL_ERROR}: {type(error).__name__}")
        ledger.record(decision)
        decisions.append(decision)
    if len(blocks) > policy.blocks_per_candidate:
        over = len(blocks) - policy.blocks_per_candidate
        decisions.append(Rejected(
            policy.blocks_per_candidate, "malformed_block",
            f"{over} blocks over the per-candidate limit of {policy.blocks_per_candidate}",
        ))
    return tuple(decisions)


def _memo(function: Callable[[str], bool]) -> Callable[[str], bool]:
    cache: dict[str, bool] = {}

    def memoized(key: str) -> bool:
        try:
            return cache[key]
        except KeyError:
            value = cache[key] = function(key)
            return value

    return memoized


def _settle_block(
    candidate: Candidate,
    proposed: ProposedBlock,
    ledger: _Ledger,
    standing: SourceStanding,
    policy: Policy,
    source_ok: Callable[[str], bool],
) -> BlockDecision:
    facts = ledger.facts
    index = proposed.index

    # 1. Identity of the effect: a modification stays a modification (P12).
    target: BlockRecord | None = None
    if proposed.wants_modification:
        resolved = resolve_target(proposed.replaces, ledger.lookup)
        if isinstance(resolved, InvalidTarget):
            return RevisionRejected(index, resolved.target, "invalid_target", resolved.detail)
        target = resolved
    block_id = target.block_id if target is not None else issue_block_id(candidate.run_id, candidate.candidate_id, index)
    target_id = target.block_id if target is not None else None

    # 2. Mechanical extraction (P4).
    extracted = extract(proposed)
    if isinstance(extracted, NotExtractable):
        return Rejected(index, extracted.reason, extracted.detail, target_id)

    # 3. Original source proof over everything the block proposes (P7, P8, P21).
    tokens = list(scan(extracted.text))
    resolutions = {r.source_id: r for r in resolve_all((t.id for t in tokens if t.kind == "cite"), facts, standing)}
    unauthorized = first_unauthorized(resolutions.values())
    if unauthorized is not None:
        return Rejected(index, "unauthorized_source", f"{unauthorized.source_id}: {unauthorized.why}", target_id)
    explicit = extracted.depends_on
    refs = [t.id for t in tokens if t.kind == "ref"]
    dependencies = check_dependencies(block_id, [*explicit, *refs], ledger.lookup, source_ok)
    if dependencies.rejected is not None:
        return Rejected(index, "unauthorized_source", dependencies.rejected, target_id)

    # 4. Retain the permitted body; degrade optional attachments (P5, P8, P9).
    pieces = _pieces(extracted.text, tokens, facts, source_ok)
    fitted = fit(pieces, policy.display_char_limit)
    kept_tokens = [p.binding for p in fitted.pieces if p.atomic and isinstance(p.binding, Token)]
    kept_values = [p.binding for p in fitted.pieces if p.atomic and isinstance(p.binding, RenderedValue)]
    if fitted.truncated:
        kept_refs = {t.id for t in kept_tokens if t.kind == "ref"}
        dependencies = check_dependencies(
            block_id, [*explicit, *(r for r in refs if r in kept_refs)], ledger.lookup, source_ok
        )
    citations = _citations(kept_tokens, resolutions)
    numbers = _numbers(kept_values)
    valid = [c.source_id for c in citations if c.status == "valid"]
    hints: list[str] = []
    if len(valid) < len(citations):
        hints.append("citation_dropped")
    if any(not value.available for value in kept_values):
        hints.append("numeric_unavailable")
    if extracted.dropped or dependencies.dropped:
        hints.append("metadata_dropped")
    if fitted.truncated:
        hints.append("truncated")
    sources = effective_sources(
        [*valid, *(v.source_id for v in kept_values if v.available and v.source_id is not None)],
        dependencies.inherited,
    )
    display = fitted.text
    view = BlockView(
        block_id=block_id,
        revision=target.revision + 1 if target is not None else 1,
        delivery_ordinal=ordinal_for(target, ledger.next_ordinal),
        candidate_id=candidate.candidate_id,
        content=Content(type=extracted.content_type, markdown=display),
        role=extracted.role,
        citations=citations,
        numbers=numbers,
        depends_on=list(dependencies.kept),
        source_hint=source_hint(len(valid), len(citations)),
        effective_sources=None if sources is None else list(sources),
        hints=block_hints(hints),
        truncated=fitted.truncated,
        body_sha256=hashlib.sha256(display.encode("utf-8")).hexdigest(),
    )
    state = view.model_dump(mode="json")
    digest = fingerprint(state, extracted.labels)

    # 5. Exact duplicate of a live, committed revision (P11).
    if block_id not in ledger.touched:
        duplicate = find_duplicate(digest, target, facts.fingerprints, facts.blocks.get)
        if duplicate is not None and duplicate.block_id not in ledger.touched and duplicate.receipt is not None:
            return Unchanged(index, duplicate.block_id, duplicate.revision, Receipt.model_validate(duplicate.receipt))

    # 6. Run constraints: modification quota (P13).
    key = None
    if target is not None:
        key = quota_key(candidate.candidate_id, index)
        exceeded = check_quota(
            target.block_id,
            key,
            consumed=_Consumed(ledger),
            block_modifications=ledger.block_modifications(target.block_id),
            run_modifications=ledger.run_modifications,
            policy=policy,
        )
        if exceeded is not None:
            return RevisionRejected(index, target.block_id, "quota_exceeded", exceeded.detail)

    # 7. Ready to commit (P12 revision, P18 ordinal).
    return Commit(index, view, target is not None, target_id, key, digest, extracted.labels, state)


class _Consumed:
    """``key in consumed`` over the run's facts and this candidate's earlier blocks."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: _Ledger) -> None:
        self.ledger = ledger

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.ledger.is_consumed(key)


def _pieces(text: str, tokens: list[Token], facts: RunFacts, source_ok: Callable[[str], bool]) -> list[Piece]:
    pieces: list[Piece] = []
    position = 0
    for token in tokens:
        if token.start > position:
            pieces.append(Piece(text[position:token.start]))
        if token.kind == "num":
            value = render(token.id, facts.numerics, source_ok)
            pieces.append(Piece(value.rendered, atomic=True, binding=value))
        else:
            pieces.append(Piece(token.text, atomic=True, binding=token))
        position = token.end
    if position < len(text):
        pieces.append(Piece(text[position:]))
    return pieces


def _citations(tokens: list[Token], resolutions: Mapping[str, Resolution]) -> list[Citation]:
    seen: dict[str, Citation] = {}
    for token in tokens:
        if token.kind == "cite" and token.id not in seen:
            status = "valid" if resolutions[token.id].standing == "valid" else "dropped"
            seen[token.id] = Citation(source_id=token.id, status=status)
    return list(seen.values())


def _numbers(values: list[RenderedValue]) -> list[RenderedNumber]:
    seen: dict[str, RenderedNumber] = {}
    for value in values:
        if value.handle_id not in seen:
            seen[value.handle_id] = RenderedNumber(handle_id=value.handle_id, rendered=value.rendered, version=value.version)
    return list(seen.values())


def cited_sources(candidate: Candidate) -> set[str]:
    """The source ids ``candidate``'s own bodies cite: what its settlement resolves (P7, P8),
    known from the message alone, before its run is read."""
    ids: set[str] = set()
    for proposed in candidate.blocks:
        if isinstance(proposed.markdown, str):
            ids.update(t.id for t in scan(clean(proposed.markdown)) if t.kind == "cite")
        table = render_table(proposed.table) if proposed.table is not None else None
        if table:
            ids.update(t.id for t in scan(table) if t.kind == "cite")
    return ids


def sources_to_check(candidate: Candidate, facts: RunFacts) -> frozenset[str]:
    """The source ids whose standing one settlement of ``candidate`` may read:
    load these from the registry to build the :class:`SourceStanding`."""
    ids: set[str] = set(facts.grants) | cited_sources(candidate)
    for record in facts.blocks.values():
        ids.update(record.effective_sources or ())
    ids.update(value.source_id for value in facts.numerics.values() if value.source_id is not None)
    return frozenset(ids)


def relied_sources(decisions: tuple[BlockDecision, ...]) -> frozenset[str]:
    """Sources the committed blocks stand on: record the run as their dependent."""
    return frozenset(
        source_id
        for decision in decisions
        if isinstance(decision, Commit)
        for source_id in (decision.block.effective_sources or ())
    )

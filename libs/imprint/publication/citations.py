"""P7, P8: a citation counts only with original standing.

Each ``[[cite:<id>]]`` resolves, by its exact full id, to one of:

``valid``
    granted to this run (``evidence.granted``), not revoked for the run's
    account, not tombstoned, and if private, owned by the run's account.
``unauthorized``
    the source exists — registered or granted — but this run may not rely on
    it: private and not granted, another account's, revoked, tombstoned. The
    block is the dependent effect and is rejected ``unauthorized_source``,
    alone (P8).
``unresolved``
    it resolves to nothing this run holds: misspelled, truncated, guessed, or a
    public registered source that was never granted to this run. The binding
    is dropped and the block is published with ``citation_dropped`` (P8).

Where a grant and the registry disagree on scope, the stricter (private) wins;
the registry's owner wins over the grant's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from imprint.publication.facts import RunFacts
from imprint.publication.sources import SourceStanding

Standing = Literal["valid", "unauthorized", "unresolved"]


@dataclass(frozen=True, slots=True)
class Resolution:
    source_id: str
    standing: Standing
    why: str
    """Internal detail; may name a private source, so it never reaches a client."""


def resolve(source_id: str, facts: RunFacts, standing: SourceStanding) -> Resolution:
    grant = facts.grants.get(source_id)
    record = standing.get(source_id)
    account = facts.account_id
    if record is not None:
        if record.tombstoned:
            return Resolution(source_id, "unauthorized", "source is tombstoned")
        if record.revoked_for(account):
            return Resolution(source_id, "unauthorized", "source is revoked for this account")
    registered = record is not None and record.registered
    private = (grant is not None and grant.scope == "private") or (registered and record.scope == "private")  # type: ignore[union-attr]
    if grant is None:
        if registered and private:
            return Resolution(source_id, "unauthorized", "private source not granted to this run")
        if registered:
            return Resolution(source_id, "unresolved", "public source not granted to this run")
        return Resolution(source_id, "unresolved", "no such source for this run")
    if private:
        owner = record.owner_account_id if registered and record.owner_account_id else grant.owner_account_id  # type: ignore[union-attr]
        if account is None or owner != account:
            return Resolution(source_id, "unauthorized", "private source of another account")
    return Resolution(source_id, "valid", "granted")


def resolve_all(source_ids: Iterable[str], facts: RunFacts, standing: SourceStanding) -> tuple[Resolution, ...]:
    return tuple(resolve(source_id, facts, standing) for source_id in dict.fromkeys(source_ids))


def still_standing(source_id: str, facts: RunFacts, standing: SourceStanding) -> bool:
    """For a source a block inherits (through a dependency or a numeric handle):
    it was valid when first relied on; it fails only if now unauthorized."""
    return resolve(source_id, facts, standing).standing != "unauthorized"


def first_unauthorized(resolutions: Iterable[Resolution]) -> Resolution | None:
    return next((r for r in resolutions if r.standing == "unauthorized"), None)

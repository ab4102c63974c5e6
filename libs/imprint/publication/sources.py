"""The source registry as Publication sees it (``imprint.sources.v1``).

:class:`SourceRecord` is one event-sourced aggregate per source id: registered,
revoked (for everyone or for one account), tombstoned, and which runs committed
a block relying on it (so a revocation knows which runs to visit, P21).
:class:`SourceStanding` is the pure value citation checks read (P7, P8).

A revocation or tombstone is final for this id: registering it again does not
restore it (a restored document comes back under a new id).

R8: reliance is split by *shard*. Logs written before version 2 of these events call
it a *lane* (``SourceRecord.LaneOpened {lane}``, ``SourceDependents.Created {lane}``,
and ``lane``/``lanes`` in their snapshots); their upcasters read those as shards, and
the aggregate id keeps the old spelling (``<source_id>#lane:<shard>``), so an old log's
aggregates are found under the ids it wrote."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Literal, Mapping

from eventsourcing.domain import Aggregate
from eventsourcing.utils import register_topic

from imprint.ids import FoundByKey, remembered
from imprint.renames import lane_is_shard

Scope = Literal["public", "private"]

SOURCE_NAMESPACE = uuid.UUID("1f3e2d4c-5b6a-5978-8e9d-0a1b2c3d4e5f")


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What the registry says about one source id."""

    source_id: str
    registered: bool = False
    scope: Scope | None = None
    owner_account_id: str | None = None
    revoked_for_all: bool = False
    revoked_accounts: frozenset[str] = frozenset()
    tombstoned: bool = False

    def revoked_for(self, account_id: str | None) -> bool:
        """An unknown account is treated as covered by any per-account revocation."""
        if self.revoked_for_all:
            return True
        if account_id is None:
            return bool(self.revoked_accounts)
        return account_id in self.revoked_accounts


@dataclass(frozen=True, slots=True)
class SourceStanding:
    """The registry facts for the sources one settlement touches."""

    records: Mapping[str, SourceFacts] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, *facts: SourceFacts) -> SourceStanding:
        return cls(MappingProxyType({f.source_id: f for f in facts}))

    def get(self, source_id: str) -> SourceFacts | None:
        return self.records.get(source_id)

    def with_facts(self, facts: SourceFacts) -> SourceStanding:
        return SourceStanding(MappingProxyType({**self.records, facts.source_id: facts}))


EMPTY_STANDING = SourceStanding()


def no_revocation() -> dict[str, Any]:
    """A revocation noted beside the registry (on a run, on a shard), JSON-shaped: nothing yet."""
    return {"tombstoned": False, "revoked_for_all": False, "revoked_accounts": []}


def note_revocation(noted: dict[str, Any], *, tombstoned: bool, account_id: str | None) -> None:
    """Fold one ``source.revoked`` / ``source.tombstoned`` into ``noted`` (in place)."""
    if tombstoned:
        noted["tombstoned"] = True
    elif account_id is None:
        noted["revoked_for_all"] = True
    elif account_id not in noted["revoked_accounts"]:
        noted["revoked_accounts"].append(account_id)


def with_noted(facts: SourceFacts, noted: Mapping[str, Any] | None) -> SourceFacts:
    """The registry's ``facts``, with a revocation noted elsewhere added (never removed)."""
    if noted is None:
        return facts
    return replace(facts, tombstoned=facts.tombstoned or noted["tombstoned"],
                   revoked_for_all=facts.revoked_for_all or noted["revoked_for_all"],
                   revoked_accounts=facts.revoked_accounts | frozenset(noted["revoked_accounts"]))


class RelianceEvent(Aggregate.Event):
    """Run ``run_id`` relies on the source: it joins the aggregate's ``dependents``.
    A base, never stored itself: each subclass declares its own ``class_version``."""

    run_id: str

    def apply(self, aggregate: Any) -> None:
        aggregate.dependents.append(self.run_id)


@remembered
def source_record_id(source_id: str) -> uuid.UUID:
    """``SourceRecord`` id: uuid5 of the source id."""
    return uuid.uuid5(SOURCE_NAMESPACE, source_id)


class SourceRecord(FoundByKey, Aggregate, key=source_record_id, by=("source_id",)):
    """One source id's registry history, plus the runs that rely on it."""

    class_version = 2
    """v2: the snapshot state's ``lanes`` is ``shards``."""

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        # A snapshot older than the lanes themselves has none: no shard was opened then.
        state["shards"] = state.pop("lanes", [])

    def __init__(self, source_id: str) -> None:
        self.source_id = source_id
        self.registered = False
        self.scope: str | None = None
        self.owner_account_id: str | None = None
        self.title = ""
        self.revoked_for_all = False
        self.revoked_accounts: list[str] = []
        self.tombstoned = False
        self.dependents: list[str] = []
        """Runs recorded before reliance moved to :class:`SourceDependents` (older logs)."""
        self.shards: list[str] = []
        """The shards with a :class:`SourceDependents` aggregate for this source."""

    class Created(Aggregate.Created):
        class_version = 1
        source_id: str

    class Registered(Aggregate.Event):
        class_version = 1
        scope: str
        owner_account_id: str
        title: str

        def apply(self, record: SourceRecord) -> None:
            record.registered = True
            record.scope = self.scope
            record.owner_account_id = self.owner_account_id
            record.title = self.title

    class Revoked(Aggregate.Event):
        class_version = 1
        account_id: str | None
        reason: str

        def apply(self, record: SourceRecord) -> None:
            if self.account_id is None:
                record.revoked_for_all = True
            elif self.account_id not in record.revoked_accounts:
                record.revoked_accounts.append(self.account_id)

    class Tombstoned(Aggregate.Event):
        class_version = 1

        def apply(self, record: SourceRecord) -> None:
            record.tombstoned = True

    class RelianceRecorded(RelianceEvent):
        """Reliance as older logs recorded it; it is now recorded on the shard's :class:`SourceDependents`."""

        class_version = 1

    class ShardOpened(Aggregate.Event):
        """v1 was ``LaneOpened {lane}`` (its topic still resolves here)."""

        class_version = 2
        shard: str

        upcast_v1_v2 = staticmethod(lane_is_shard)

        def apply(self, record: SourceRecord) -> None:
            record.shards.append(self.shard)

    def open_shard(self, shard: str) -> bool:
        """Once per shard: a revocation must find every shard's dependents."""
        if shard in self.shards:
            return False
        self.trigger_event(self.ShardOpened, shard=shard)
        return True

    def register(self, scope: Scope, owner_account_id: str, title: str = "") -> bool:
        """Idempotent: the same registration again appends nothing."""
        if self.registered and (self.scope, self.owner_account_id, self.title) == (scope, owner_account_id, title):
            return False
        self.trigger_event(self.Registered, scope=scope, owner_account_id=owner_account_id, title=title)
        return True

    def revoke(self, account_id: str | None = None, reason: str = "") -> bool:
        if self.revoked_for_all or (account_id is not None and account_id in self.revoked_accounts):
            return False
        self.trigger_event(self.Revoked, account_id=account_id, reason=reason)
        return True

    def tombstone(self) -> bool:
        if self.tombstoned:
            return False
        self.trigger_event(self.Tombstoned)
        return True

    def record_reliance(self, run_id: str) -> bool:
        if run_id in self.dependents:
            return False
        self.trigger_event(self.RelianceRecorded, run_id=run_id)
        return True

    def standing(self) -> SourceFacts:
        return SourceFacts(
            source_id=self.source_id,
            registered=self.registered,
            scope=self.scope,  # type: ignore[arg-type]
            owner_account_id=self.owner_account_id,
            revoked_for_all=self.revoked_for_all,
            revoked_accounts=frozenset(self.revoked_accounts),
            tombstoned=self.tombstoned,
        )


@remembered
def source_dependents_id(source_id: str, shard: str) -> uuid.UUID:
    """``SourceDependents`` id: uuid5 of the source id and the shard."""
    # "#lane:" is how logs spell this id since before the rename: changing it would lose their aggregates.
    return uuid.uuid5(SOURCE_NAMESPACE, f"{source_id}#lane:{shard}")


class SourceDependents(FoundByKey, Aggregate, key=source_dependents_id, by=("source_id", "shard")):
    """The runs of one *shard* that rely on a source.

    A shard is the unit of ownership of Publication's input: one instance owns it, and
    every message of a run arrives on it. Its value is the runtime topic's partition a
    run's messages come from (:attr:`imprint.publication.handling.Context.shard`), but
    nothing here depends on that: the shard is what one writer owns, not where Kafka
    keeps it.

    Reliance is split by shard so that a source cited by every run costs the same after
    a million runs as after ten, and so that the Publication instance owning a shard is
    the only one writing its aggregate: instances never contend over a popular source.
    A revocation notes itself on every shard of the source (and on every dependent run);
    a shard's own noted standing then stands in for a stale copy of the source."""

    class_version = 2
    """v2: the snapshot state's ``lane`` is ``shard``."""

    upcast_v1_v2 = staticmethod(lane_is_shard)

    def __init__(self, source_id: str, shard: str) -> None:
        self.source_id = source_id
        self.shard = shard
        self.dependents: list[str] = []
        self.noted = no_revocation()

    class Created(Aggregate.Created):
        """v1 named the shard ``lane``."""

        class_version = 2
        source_id: str
        shard: str

        upcast_v1_v2 = staticmethod(lane_is_shard)

    class RelianceRecorded(RelianceEvent):
        """A run of this shard relies on the source."""

        class_version = 1

    class StandingNoted(Aggregate.Event):
        class_version = 1
        tombstoned: bool
        account_id: str | None

        def apply(self, dependents: SourceDependents) -> None:
            note_revocation(dependents.noted, tombstoned=self.tombstoned, account_id=self.account_id)

    def record_reliance(self, run_id: str) -> None:
        """Once per (run, source): the run remembers which sources it relies on."""
        self.trigger_event(self.RelianceRecorded, run_id=run_id)

    def note_standing(self, *, tombstoned: bool, account_id: str | None) -> None:
        self.trigger_event(self.StandingNoted, tombstoned=tombstoned, account_id=account_id)

    def noted_standing(self, facts: SourceFacts) -> SourceFacts:
        return with_noted(facts, self.noted)


def standing_of(records: Iterable[SourceRecord]) -> SourceStanding:
    return SourceStanding.of(*(record.standing() for record in records))


register_topic("imprint.publication.sources:SourceRecord.LaneOpened", SourceRecord.ShardOpened)
"""Logs written before the rename name ``ShardOpened`` by its old topic; they still read (v1, upcast)."""

"""The aggregates Publication's handlers read and create in a unit's
:class:`~imprint.workspace.Workspace`: a run, a source's record and its reliance per shard, a
conversation's run index, and what a settlement may know of the registry (P7, P8, P21)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Iterator

from imprint.contracts.runtime import RunAdmitted
from imprint.publication.conversations import ConversationRuns
from imprint.publication.run import PublicationRun
from imprint.publication.sources import SourceDependents, SourceFacts, SourceRecord, SourceStanding
from imprint.workspace import Workspace



def run_of(ws: Workspace, run_id: str) -> PublicationRun:
    run = ws.get(PublicationRun, PublicationRun.id_for(run_id))
    if run is None:
        run = PublicationRun(run_id)
        ws.add(run)
    return run


def source_record(ws: Workspace, source_id: str, *, create: bool) -> SourceRecord | None:
    record = ws.get(SourceRecord, SourceRecord.id_for(source_id))
    if record is None and create:
        record = SourceRecord(source_id)
        ws.add(record)
    return record


def dependents_of(ws: Workspace, source_id: str, shard: str) -> SourceDependents:
    """The shard's reliance record for a source; opening a new shard is noted on the source."""
    dependents = ws.get(SourceDependents, SourceDependents.id_for(source_id, shard))
    if dependents is None:
        dependents = SourceDependents(source_id, shard)
        ws.add(dependents)
        record = source_record(ws, source_id, create=True)
        assert record is not None
        record.open_shard(shard)
    return dependents


def conversation_of(ws: Workspace, conversation_id: str, account_id: str | None = None) -> ConversationRuns | None:
    """The conversation's run index; created only when ``account_id`` is given (at admission)."""
    conversation = ws.get(ConversationRuns, ConversationRuns.id_for(conversation_id))
    if conversation is None and account_id is not None:
        conversation = ConversationRuns(conversation_id, account_id)
        ws.add(conversation)
    return conversation


class _RegistryView(Mapping[str, SourceFacts]):
    """The registry facts of whichever sources a settlement reads, loaded on first read:
    the cost of a settlement follows what its candidate cites, not the run's history."""

    __slots__ = ("_ws", "_run", "_shard", "_seen")

    def __init__(self, ws: Workspace, run: PublicationRun, shard: str) -> None:
        self._ws = ws
        self._run = run
        self._shard = shard
        self._seen: dict[str, SourceFacts | None] = {}

    def __getitem__(self, source_id: str) -> SourceFacts:
        if source_id not in self._seen:
            record = source_record(self._ws, source_id, create=False)
            facts = None
            if record is not None:
                facts = self._run.noted_standing(record.standing())
                dependents = self._ws.get(SourceDependents, SourceDependents.id_for(source_id, self._shard))
                if dependents is not None:  # a revocation noted on this shard outranks an older copy of the source
                    facts = dependents.noted_standing(facts)
            self._seen[source_id] = facts
        facts = self._seen[source_id]
        if facts is None:
            raise KeyError(source_id)
        return facts

    def __iter__(self) -> Iterator[str]:
        return (k for k, v in self._seen.items() if v is not None)

    def __len__(self) -> int:
        return sum(1 for v in self._seen.values() if v is not None)


def standing_in(ws: Workspace, run: PublicationRun, shard: str) -> SourceStanding:
    """What ``run`` may know of the registry: the sources' records, and the revocations
    noted on its shard and on itself."""
    return SourceStanding(_RegistryView(ws, run, shard))


def aggregates_read(message: Any) -> tuple[uuid.UUID, ...]:
    """The aggregates :func:`handle` reads first for ``message``: its run, and an
    admission's conversation. A store may look them up together before the handlers run
    (a new run's aggregates are then known to be missing without a read each)."""
    run_id = getattr(message, "run_id", None)
    ids = [PublicationRun.id_for(run_id)] if isinstance(run_id, str) else []
    if isinstance(message, RunAdmitted):
        ids.append(ConversationRuns.id_for(message.conversation_id))
    return tuple(ids)

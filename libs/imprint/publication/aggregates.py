"""The aggregates Publication's handlers read and create in a unit's
:class:`~imprint.workspace.Workspace`: a run, a source's record and its reliance per shard, a
conversation's run index, and what a settlement may know of the registry (P7, P8, P21);
and which of them a message reads (:func:`aggregates_read`), for a unit's ``prepare`` to
want before its handlers run."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Iterator

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.runtime import AnswerPart, AnswerText, RunAdmitted
from imprint.contracts.sources import SourceRegistered, SourceRevoked, SourceTombstoned
from imprint.publication.candidate import Candidate, intake
from imprint.publication.conversations import ConversationRuns
from imprint.publication.run import PublicationRun
from imprint.publication.settlement import cited_sources
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


def aggregates_read(message: Any, cited: Iterable[str] | None = None) -> tuple[uuid.UUID, ...]:
    """Every aggregate :func:`~imprint.publication.handling.handle` reads for ``message``
    that the message alone names: the one place that says it, so that a unit's ``prepare``
    has them loaded together before the first handler (a new run's aggregates are then
    known to be missing without a read each).

    Its run; an admission's or a deletion's conversation; a source message's record; a
    candidate's cited sources' records (``cited``: :func:`cited_by`, when already known).
    Besides these a candidate's settlement reads each cited source's reliance on its shard
    (:func:`reliance_read`), and what only state names is read with it or when asked for:
    the run's conversation (the run's ``read_with``, X1, X8), the sources a block inherits
    through another block or a numeric handle, the runs a withdrawal or a deletion reaches."""
    run_id = getattr(message, "run_id", None)
    ids = [PublicationRun.id_for(run_id)] if isinstance(run_id, str) else []
    if isinstance(message, (RunAdmitted, ConversationDeleteRequested)):
        ids.append(ConversationRuns.id_for(message.conversation_id))
    elif isinstance(message, (SourceRegistered, SourceRevoked, SourceTombstoned)):
        ids.append(SourceRecord.id_for(message.source_id))
    else:
        ids.extend(SourceRecord.id_for(source_id) for source_id in (cited_by(message) if cited is None else cited))
    return tuple(ids)


def cited_by(message: Any) -> list[str]:
    """The sources a candidate's bodies cite, in a stable order (none for any other message)."""
    if not isinstance(message, (AnswerText, AnswerPart)):
        return []
    candidate = intake(message)
    return sorted(cited_sources(candidate)) if isinstance(candidate, Candidate) else []


def reliance_read(cited: Iterable[str], shards: Sequence[str]) -> list[uuid.UUID]:
    """The reliance records a settlement citing ``cited`` may read: each source's on each of
    the unit's ``shards``, one of which is the candidate's (P21: a revocation noted there
    outranks an older copy of the source; the run's reliance is recorded there). Which one is
    the message's context's to say, so a store loads them only if it holds them already; a
    source's first reliance on a shard, or one the store no longer holds, is read when asked."""
    return [SourceDependents.id_for(source_id, shard) for source_id in cited for shard in shards]

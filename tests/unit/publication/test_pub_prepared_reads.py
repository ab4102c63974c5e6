"""A handler works on what its unit's ``prepare`` wanted: every aggregate
``imprint.publication.handling.handle`` reads for a run's messages on the way to a commit —
an admission, grants, candidates citing sources, a revision — is one
:func:`~imprint.publication.handling.prepare` declared from the messages alone
(:func:`~imprint.publication.aggregates.aggregates_read`), one a loaded aggregate names as
read with it (``read_with``: an admitted run's conversation), or a cited source's reliance
on the unit's shard, held by the store (:func:`~imprint.publication.aggregates.reliance_read`).
The store loads them all in one go before the first handler, and a handler's reads do not
leave the workspace (``docs/architecture.md``, "One handler table per part").

Here the store is a dict whose every aggregate is held (the hot path), and its workspace
(:class:`Prepared`) loads what was wanted the way
``services.common.event_log.StoredWorkspace.load_wanted`` does; every read beyond that is
written down, and the test fails on it."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from pub_helpers import ACCOUNT, PRIVATE_OWN, PUBLIC, RUN, part

from imprint.contracts.runtime import AnswerText, EvidenceGranted, QuestionConditionSet, RunAdmitted
from imprint.contracts.sources import SourceRegistered
from imprint.publication import PublicationRun
from imprint.publication.handling import Context, Effects, handle, prepare
from imprint.publication.settlement import Commit
from imprint.publication.sources import SourceDependents
from imprint.workspace import MemoryWorkspace

SHARD = "2"
FIRST = "run-0"
"""A run whose candidate relies on the sources on the shard first."""


class Prepared(MemoryWorkspace):
    """One unit's workspace over ``stored`` (what earlier units committed): it holds what
    its ``prepare`` wanted and what those name as read with them; any other read is one
    the walk was not to make."""

    def __init__(self, stored: dict[UUID, Any], unwanted: list[UUID]) -> None:
        super().__init__(shards=(SHARD,))
        self.stored = stored
        self.unwanted = unwanted

    def load_wanted(self) -> None:
        wanted = dict(self.wanted)
        self.wanted.clear()
        while wanted:
            loaded = []
            for aggregate_id, certain in wanted.items():
                if aggregate_id in self.store or aggregate_id in self.missing:
                    continue
                if aggregate_id in self.stored:
                    loaded.append(self.store.setdefault(aggregate_id, self.stored[aggregate_id]))
                elif certain:  # one wanted only if held is not known missing: it is read if asked for
                    self.missing.add(aggregate_id)
            wanted = {named: True for aggregate in loaded for named in getattr(aggregate, "read_with", ())}

    def fetch(self, aggregate_id: UUID) -> Any:
        """A read the store would make when asked (written down; the handler goes on)."""
        self.unwanted.append(aggregate_id)
        return self.stored.get(aggregate_id)


def unit(stored: dict[UUID, Any], *messages: Any) -> tuple[list[Effects], list[UUID]]:
    """One unit as ``services.common.dispatch.Dispatch`` runs it: prepare, load, handle each;
    then its changes are kept as committed."""
    unwanted: list[UUID] = []
    ws = Prepared(stored, unwanted)
    prepared = prepare(ws, list(messages))
    ws.load_wanted()
    effects = [handle(ws, message, Context(shard=SHARD)) for message in prepared]
    ws.pending()
    stored.update(ws.store)
    return effects, unwanted


def admitted(run_id: str) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=ACCOUNT, conversation_id=f"conv-{run_id}", message_id=f"m-{run_id}",
                       question="What does the report say?", qcs=QuestionConditionSet(qcs_id=f"q-{run_id}"))


def commits(effects: Effects) -> list[Commit]:
    assert effects.then is not None, effects
    return [d for d in effects.then.decisions if isinstance(d, Commit)]


@pytest.mark.rule("P15")
@pytest.mark.rule("P7")
@pytest.mark.rule("X1")
def test_handle_reads_only_what_prepare_wanted_on_the_way_to_a_commit() -> None:
    stored: dict[UUID, Any] = {}
    _, unwanted = unit(stored,
                       SourceRegistered(source_id=PUBLIC, scope="public", owner_account_id="publisher", title="r"),
                       SourceRegistered(source_id=PRIVATE_OWN, scope="private", owner_account_id=ACCOUNT, title="m"))
    assert unwanted == []

    _, unwanted = unit(stored, *[message for run_id in (FIRST, RUN) for message in (
        admitted(run_id),
        EvidenceGranted(run_id=run_id, source_id=PUBLIC, scope="public", owner_account_id="publisher", title="r"),
        EvidenceGranted(run_id=run_id, source_id=PRIVATE_OWN, scope="private", owner_account_id=ACCOUNT,
                        title="m"))])
    assert unwanted == [], "an admission and its grants read what they name"

    (first_ever,), unwanted = unit(stored, part(run_id=FIRST, markdown=f"[[cite:{PUBLIC}]] [[cite:{PRIVATE_OWN}]]"))
    assert len(commits(first_ever)) == 1
    assert unwanted == [SourceDependents.id_for(PUBLIC, SHARD), SourceDependents.id_for(PRIVATE_OWN, SHARD)], \
        "a source's first reliance on a shard is the one read left to when it is asked for"

    cited = part(tool_call_id="call-a", blocks=[
        {"markdown": f"Revenue rose [[cite:{PUBLIC}]]."},
        {"markdown": f"The memo agrees [[cite:{PRIVATE_OWN}]] and [[cite:src:public:nowhere]]."}])
    (effects,), unwanted = unit(stored, cited)
    assert unwanted == [], "a candidate's run, its conversation, its cited sources and their reliance were loaded"
    first, second = commits(effects)
    assert list(first.block.effective_sources or ()) == [PUBLIC]
    assert list(second.block.effective_sources or ()) == [PRIVATE_OWN]

    revision = part(tool_call_id="call-b", markdown=f"Revenue rose 4% [[cite:{PRIVATE_OWN}]].",
                    replaces=first.block_id)
    text = AnswerText(run_id=RUN, turn_id="turn-2", segment=0, text=f"In short [[cite:{PUBLIC}]].")
    (revised, answered), unwanted = unit(stored, revision, text)
    assert unwanted == [], "a revision and a plain answer read only what was wanted"
    (change,) = commits(revised)
    assert change.block_id == first.block_id and change.is_modification and revised.durable_first
    assert len(commits(answered)) == 1
    run = stored[PublicationRun.id_for(RUN)]
    assert set(run.relied_on()) == {PUBLIC, PRIVATE_OWN}

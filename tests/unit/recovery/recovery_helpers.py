"""Builders for the recovery core tests: real ``PublicationRun`` aggregates driven by
commands, whose pending events are the log the folds read (no I/O)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from imprint.contracts.runtime import AnswerPart, AnswerText
from imprint.publication import (
    Candidate,
    Commit,
    PublicationRun,
    SourceFacts,
    SourceRecord,
    SourceStanding,
    intake,
    standing_of,
)
from imprint.publication.tokens import token
from imprint.recovery import LogFold, RunLedger

RUN = "run-r"
ACCOUNT = "acct-1"
OTHER = "acct-2"
PUBLIC = "src:public:annual-report-2024"
PRIVATE_OWN = "src:private:acct-1:memo"
HANDLE = "num-weight"

_calls = itertools.count(1)


def cite(source_id: str) -> str:
    return token("cite", source_id)


def num(handle: str = HANDLE) -> str:
    return token("num", handle)


def ref(block_id: str) -> str:
    return token("ref", block_id)


def part(*, tool_call_id: str | None = None, run_id: str = RUN, **arguments: Any) -> AnswerPart:
    return AnswerPart(run_id=run_id, turn_id="turn-1", sealed=True, arguments=arguments,
                      tool_call_id=tool_call_id if tool_call_id is not None else f"call-{next(_calls)}")


def candidate(*, tool_call_id: str | None = None, run_id: str = RUN, **arguments: Any) -> Candidate:
    result = intake(part(tool_call_id=tool_call_id, run_id=run_id, **arguments))
    assert isinstance(result, Candidate), result
    return result


def text_candidate(text: str, *, turn_id: str = "turn-1", segment: int = 0, run_id: str = RUN) -> Candidate:
    result = intake(AnswerText(run_id=run_id, turn_id=turn_id, segment=segment, text=text))
    assert isinstance(result, Candidate)
    return result


def registry(*extra: SourceFacts) -> SourceStanding:
    standing = SourceStanding.of(
        SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="publisher"),
        SourceFacts(PRIVATE_OWN, registered=True, scope="private", owner_account_id=ACCOUNT),
    )
    for facts in extra:
        standing = standing.with_facts(facts)
    return standing


def sources(*changes: tuple[str, str]) -> SourceStanding:
    """Standing built through real ``SourceRecord`` aggregates; ``changes`` are
    ``(source_id, "revoke"|"tombstone"|"revoke:<account>")``."""
    public = SourceRecord(PUBLIC)
    public.register("public", "publisher", "Annual report 2024")
    own = SourceRecord(PRIVATE_OWN)
    own.register("private", ACCOUNT, "My memo")
    records = {PUBLIC: public, PRIVATE_OWN: own}
    for source_id, change in changes:
        record = records[source_id]
        if change == "revoke":
            record.revoke(None, "withdrawn by publisher")
        elif change.startswith("revoke:"):
            record.revoke(change.split(":", 1)[1], "per-account")
        elif change == "tombstone":
            record.tombstone()
    return standing_of(records.values())


class Log:
    """A run plus the events it has committed so far (its stream, in order)."""

    def __init__(self, run_id: str = RUN, account: str | None = ACCOUNT) -> None:
        self.run = PublicationRun(run_id=run_id)
        if account is not None:
            self.run.note_admission(account, "conv-1")
        self.run.grant_evidence(PUBLIC, "public", "publisher", "Annual report 2024")
        self.run.grant_evidence(PRIVATE_OWN, "private", ACCOUNT, "My memo")
        self.run.issue_numeric(HANDLE, "12.5", "%", 1, PUBLIC)
        self.events: list[Any] = list(self.run.collect_events())

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def flush(self) -> list[Any]:
        new = list(self.run.collect_events())
        self.events.extend(new)
        return new

    def settle(self, proposal: Candidate, standing: SourceStanding | None = None) -> tuple[Any, ...]:
        decisions = self.run.settle(proposal, standing if standing is not None else registry())
        self.flush()
        return decisions

    def commit(self, markdown: str, **arguments: Any) -> Commit:
        arguments.setdefault("run_id", self.run_id)
        decisions = self.settle(candidate(markdown=markdown, **arguments))
        assert len(decisions) == 1 and isinstance(decisions[0], Commit), decisions
        return decisions[0]

    def fold(self) -> LogFold:
        return LogFold.of(self.events)

    def ledger(self) -> RunLedger:
        ledger = self.fold().ledger(self.run_id)
        assert ledger is not None
        return ledger


def tampered(event: Any, **block_changes: Any) -> Any:
    """A copy of a stored commit event whose block record was altered (as if its row
    had been edited or damaged); ``None`` removes a key."""
    clone = copy.deepcopy(event)
    block = dict(clone.__dict__["block"])
    for key, value in block_changes.items():
        if value is None and key != "effective_sources":
            block.pop(key, None)
        else:
            block[key] = value
    clone.__dict__["block"] = block
    return clone


def without(event: Any, attribute: str) -> Any:
    clone = copy.deepcopy(event)
    clone.__dict__.pop(attribute, None)
    return clone

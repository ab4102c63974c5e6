"""Shared builders for the Publication core tests (imported by name; the
fixtures live in ``conftest.py``)."""

from __future__ import annotations

import itertools
from typing import Any

from imprint.contracts.runtime import AnswerPart, AnswerText
from imprint.publication import (
    Candidate,
    Commit,
    PublicationRun,
    SourceFacts,
    SourceStanding,
    intake,
)

RUN = "run-1"
ACCOUNT = "acct-1"
OTHER = "acct-2"
PUBLIC = "src:public:annual-report-2024"
PRIVATE_OWN = "src:private:acct-1:memo"
PRIVATE_OTHER = "src:private:acct-2:portfolio"
UNGRANTED_PRIVATE = "src:private:acct-1:unshared-report"
UNGRANTED_PUBLIC = "src:public:press-release"

_calls = itertools.count(1)


def part(*, tool_call_id: str | None = None, sealed: bool = True, run_id: str = RUN, **arguments: Any) -> AnswerPart:
    return AnswerPart(
        run_id=run_id,
        turn_id="turn-1",
        tool_call_id=tool_call_id if tool_call_id is not None else f"call-{next(_calls)}",
        sealed=sealed,
        arguments=arguments,
    )


def candidate(*, tool_call_id: str | None = None, run_id: str = RUN, **arguments: Any) -> Candidate:
    result = intake(part(tool_call_id=tool_call_id, run_id=run_id, **arguments))
    assert isinstance(result, Candidate), result
    return result


def text_candidate(text: str, *, turn_id: str = "turn-1", segment: int = 0) -> Candidate:
    result = intake(AnswerText(run_id=RUN, turn_id=turn_id, segment=segment, text=text))
    assert isinstance(result, Candidate)
    return result


def registry() -> SourceStanding:
    """The registry as the tests' world has it."""
    return SourceStanding.of(
        SourceFacts(PUBLIC, registered=True, scope="public", owner_account_id="publisher"),
        SourceFacts(PRIVATE_OWN, registered=True, scope="private", owner_account_id=ACCOUNT),
        SourceFacts(PRIVATE_OTHER, registered=True, scope="private", owner_account_id=OTHER),
        SourceFacts(UNGRANTED_PRIVATE, registered=True, scope="private", owner_account_id=ACCOUNT),
        SourceFacts(UNGRANTED_PUBLIC, registered=True, scope="public", owner_account_id="publisher"),
    )


def new_run(run_id: str = RUN, account: str = ACCOUNT, *, pending: bool = False) -> PublicationRun:
    """An admitted run with the tests' grants and one numeric handle. Its setup
    events are collected (dropped) unless ``pending`` (to save it in an app)."""
    run = PublicationRun(run_id=run_id)
    run.note_admission(account, "conv-1")
    run.grant_evidence(PUBLIC, "public", "publisher", "Annual report 2024")
    run.grant_evidence(PRIVATE_OWN, "private", ACCOUNT, "My memo")
    run.grant_evidence(PRIVATE_OTHER, "private", OTHER, "Someone else's portfolio")
    run.issue_numeric("num-weight", "12.5", "%", 1, PUBLIC)
    if not pending:
        run.collect_events()
    return run


def commit_one(run: PublicationRun, markdown: str, **arguments: Any) -> Commit:
    """Settle a single-block candidate that must commit; return its decision."""
    decisions = run.settle(candidate(markdown=markdown, **arguments), registry())
    assert len(decisions) == 1 and isinstance(decisions[0], Commit), decisions
    return decisions[0]

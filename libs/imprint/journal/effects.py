"""What a Journal handler knows about a message besides its body (:class:`Context`) and what
it returns (:class:`Effects`): what the unit of work acts on after its commit — the message →
execution index (X4) and the instance's lease book (X10) — and the aggregates every handler
starts from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

from imprint.contracts.conversation import DEFAULT_POLICY
from imprint.journal.execution import AnswerExecution
from imprint.journal.keys import JournalKeys
from imprint.journal.leases import LeaseChange
from imprint.journal.redaction import SourceLinks
from imprint.workspace import Workspace


@dataclass(frozen=True)
class IndexIntent:
    """An update of the message → execution index, made after the commit (X4)."""

    kind: Literal["point", "drop"]
    conversation_id: str
    message_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Effects:
    """What the unit of work acts on after its commit because of one message."""

    index: tuple[IndexIntent, ...] = ()
    """Updates of the message → execution index (X4)."""
    leases: tuple[LeaseChange, ...] = ()
    """Runs held in or released from their shard's lease record (X10): the instance's lease book follows."""


NOTHING = Effects()


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler knows about a message besides its body."""

    keys: JournalKeys
    """The unit of work's keys: private fields are sealed under their conversation's (X8)."""
    shard: int = 0
    """The runtime topic's partition the message came on: which lease record holds its run (X10)."""
    policy: str = DEFAULT_POLICY
    """X12: the deployment's conversation policy, for an admission that names none."""


Handler = Callable[[Workspace, Any, Context], Effects]
"""What one message class does: it triggers events on the workspace's aggregates and returns
what the unit of work acts on after its commit."""


@overload
def execution_of(ws: Workspace, run_id: str, create: Literal[True] = True) -> AnswerExecution: ...
@overload
def execution_of(ws: Workspace, run_id: str, create: bool) -> AnswerExecution | None: ...
def execution_of(ws: Workspace, run_id: str, create: bool = True) -> AnswerExecution | None:
    """The run's execution; one is opened on first sight unless ``create`` is false (a fresh, not
    yet admitted execution: admission, a refusal or an early effect follows)."""
    return AnswerExecution.found_or_added(ws, run_id) if create else AnswerExecution.found_in(ws, run_id)


def source_links_of(ws: Workspace, source_id: str) -> SourceLinks:
    return SourceLinks.found_or_added(ws, source_id)

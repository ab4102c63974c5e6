"""What Publication decided about this process's proposals (pure: fed by an adapter).

A runtime never invents block ids: the Host issues them when a block first commits
(P12, P18). A ``send_answer_part`` caller that wants to revise a block later must
learn its id from ``imprint.publication.v1``. :class:`Decisions` matches those
messages to the proposals a writer made, by (run_id, candidate_id): a caller
:meth:`~Decisions.expect` s a proposal *before* sending it, the adapter
:meth:`~Decisions.observe` s every publication message, and the caller awaits
one decision per block (or the candidate's save outcome). Decisions for proposals
nobody expects are dropped, so memory stays bounded by what is awaited.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from imprint.contracts.publication import (
    AnswerPublished,
    AnswerRejected,
    AnswerRevisionRejected,
    AnswerUnchanged,
    SaveOutcome,
)

BlockDecision = AnswerPublished | AnswerUnchanged | AnswerRejected | AnswerRevisionRejected
CandidateOutcome = SaveOutcome
Decision = BlockDecision | CandidateOutcome


def _candidate_of(message: Any) -> str | None:
    if isinstance(message, AnswerPublished):
        return message.block.candidate_id
    if isinstance(message, AnswerUnchanged | AnswerRejected | AnswerRevisionRejected | SaveOutcome):
        return message.candidate_id
    return None  # previews, withdrawals, settlements: not a decision about one proposal


@dataclass(eq=False)
class Awaited:
    """One proposal's decisions as they arrive; :meth:`wait` returns when it is settled."""

    blocks: int | None = None
    """How many blocks the proposal carries; ``None`` until it was sent (decisions may come first)."""
    decisions: list[Decision] = field(default_factory=list)
    _settled: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, message: Decision) -> None:
        if any(d.event_id == message.event_id for d in self.decisions):
            return  # a relayed announcement seen twice
        self.decisions.append(message)
        self._check()

    def expecting(self, blocks: int) -> Awaited:
        self.blocks = blocks
        self._check()
        return self

    def _check(self) -> None:
        block_level = [d for d in self.decisions if not isinstance(d, SaveOutcome)]
        if (self.blocks is not None and len(block_level) >= self.blocks) or len(block_level) < len(self.decisions):
            self._settled.set()

    async def wait(self, timeout: float) -> list[Decision]:
        """Every decision so far once settled; what arrived within ``timeout`` otherwise."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout)
        except TimeoutError:
            pass
        return list(self.decisions)

    @property
    def settled(self) -> bool:
        return self._settled.is_set()


class Decisions:
    def __init__(self) -> None:
        self._awaited: dict[tuple[str, str], Awaited] = {}

    def expect(self, run_id: str, candidate_id: str) -> Awaited:
        """Start collecting decisions about ``candidate_id`` (call before sending it)."""
        awaited = self._awaited.get((run_id, candidate_id))
        if awaited is None:
            awaited = self._awaited[(run_id, candidate_id)] = Awaited()
        return awaited

    def forget(self, run_id: str, candidate_id: str) -> None:
        self._awaited.pop((run_id, candidate_id), None)

    def awaits(self, run_id: str) -> bool:
        """Whether any decision of ``run_id`` is awaited (lets an adapter skip decoding the rest)."""
        return any(run == run_id for run, _ in self._awaited)

    def observe(self, message: Any) -> None:
        candidate_id = _candidate_of(message)
        if candidate_id is None:
            return
        awaited = self._awaited.get((message.run_id, candidate_id))
        if awaited is not None:
            awaited.add(message)

"""X12 — a question's turn in its conversation, as the runtime SDK waits for it (pure asyncio: fed by
an adapter, no I/O of its own).

The Journal decides what a new question does under its conversation's policy and publishes the
conversation's facts on ``imprint.runs.v1`` (:mod:`imprint.contracts.conversation`);
:class:`~imprint.runtime.kafka.KafkaTurns` feeds them to :class:`Turns`. A runtime admits its run
(naming a policy, or leaving it to the deployment) and calls
``await writer.start(turns=turns)`` (:meth:`imprint.runtime.writer.RunWriter.start`), which sends
``run.queued``, waits here for the question's turn and only then sends ``run.started``:

* its turn came → :class:`Turn` (with the questions merged into it, which its run answers too);
* its conversation was deleted while it waited (X8) → :class:`NotStarted` (``deleted``);
* the policy ended it first → a typed error: :class:`RunRefused` (``reject``, with the reason),
  :class:`RunCancelled` (its user cancelled it while queued), :class:`RunMerged` (answered by the
  question it was merged into), :class:`RunSteered` (handed to the running question).

Every error is a :class:`NotStarted`: the run was ended by the Journal, the runtime sends
nothing more for it. Start :class:`~imprint.runtime.kafka.KafkaTurns` before admitting the runs it
should answer for (it reads from the topic's end).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from imprint.contracts.conversation import (
    QuestionEnded,
    QuestionMerged,
    QuestionRefused,
    QuestionStarted,
    QuestionSteered,
)
from imprint.contracts.runs import ConversationDeleted

REMEMBERED = 10_000
"""How many questions' verdicts :class:`Turns` keeps: a runtime waits right after admitting."""


@dataclass(frozen=True, slots=True)
class MergedQuestion:
    """A question folded into this run (``merge``): its own run and message stay bound (X1)."""

    run_id: str
    message_id: str
    question: str | None


@dataclass(frozen=True, slots=True)
class Turn:
    """The question's turn came: its run may start. ``merged``: questions its run answers too."""

    run_id: str
    merged: tuple[MergedQuestion, ...] = ()


class NotStarted(Exception):
    """The Journal ended the question before its turn came (X12); its run is closed."""

    def __init__(self, run_id: str, end: str, detail: str = "") -> None:
        super().__init__(f"run {run_id} did not start: {end}" + (f" ({detail})" if detail else ""))
        self.run_id = run_id
        self.end = end
        self.detail = detail


class RunRefused(NotStarted):
    """``reject``: the conversation was busy; ``reason`` says why (``conversation_busy``)."""

    def __init__(self, run_id: str, reason: str, detail: str = "") -> None:
        super().__init__(run_id, "refused", f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class RunCancelled(NotStarted):
    """Its user cancelled the question while it was queued."""


class RunMerged(NotStarted):
    """``merge``: the question was folded into ``into_run_id``, whose run answers it."""

    def __init__(self, run_id: str, into_run_id: str) -> None:
        super().__init__(run_id, "merged", f"into {into_run_id}")
        self.into_run_id = into_run_id


class RunSteered(NotStarted):
    """``steer``: the question was handed to the running ``into_run_id``."""

    def __init__(self, run_id: str, into_run_id: str) -> None:
        super().__init__(run_id, "steered", f"into {into_run_id}")
        self.into_run_id = into_run_id


@dataclass
class _Question:
    into: str | None = None
    """The question it was merged or steered into."""
    verdict: Turn | NotStarted | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class Turns:
    """The conversation facts an adapter has seen (:meth:`observe`), and who waits for a turn.
    A question's first verdict is final: it started, or the Journal ended it before."""

    def __init__(self, remember: int = REMEMBERED) -> None:
        self._remember = remember
        self._questions: OrderedDict[str, _Question] = OrderedDict()
        self._merged: dict[str, list[MergedQuestion]] = {}
        """run id → the questions merged into it so far."""

    def observe(self, message: Any) -> None:
        """A message of ``imprint.runs.v1``: a conversation fact may decide a question's turn."""
        if isinstance(message, QuestionMerged):
            self._merged.setdefault(message.into_run_id, []).append(
                MergedQuestion(message.run_id, message.message_id, message.question))
            self._question(message.run_id).into = message.into_run_id
        elif isinstance(message, QuestionSteered):
            self._question(message.run_id).into = message.into_run_id
        elif isinstance(message, QuestionStarted):
            known = {m.run_id: m for m in self._merged.get(message.run_id, ())}
            merged = tuple(known.get(r, MergedQuestion(r, r, None)) for r in message.merged)
            self._decide(message.run_id, Turn(message.run_id, merged))
        elif isinstance(message, QuestionRefused):
            self._decide(message.run_id, RunRefused(message.run_id, message.reason, message.detail))
        elif isinstance(message, QuestionEnded):
            self._decide(message.run_id, self._ended(message))
        elif isinstance(message, ConversationDeleted):  # X8: a question still waiting never starts
            self._decide(message.run_id, NotStarted(message.run_id, "deleted", "conversation deleted"))

    def verdict(self, run_id: str) -> Turn | NotStarted | None:
        """What was decided for ``run_id`` so far (``None``: nothing yet)."""
        found = self._questions.get(run_id)
        return None if found is None else found.verdict

    async def wait(self, run_id: str, timeout: float | None = None) -> Turn:
        """Until ``run_id``'s turn comes: its :class:`Turn`, or the :class:`NotStarted` that ended it.
        Raises ``TimeoutError`` after ``timeout`` seconds (``None``: no limit)."""
        question = self._question(run_id)
        if question.verdict is None:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            question.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, timeout)
            finally:
                if waiter in question.waiters:
                    question.waiters.remove(waiter)
        verdict = question.verdict
        assert verdict is not None
        if isinstance(verdict, NotStarted):
            raise verdict
        return verdict

    def _ended(self, message: QuestionEnded) -> NotStarted:
        into = self._question(message.run_id).into or ""
        if message.end == "merged":
            return RunMerged(message.run_id, into)
        if message.end == "steered":
            return RunSteered(message.run_id, into)
        if message.end == "cancelled":
            return RunCancelled(message.run_id, "cancelled")
        return NotStarted(message.run_id, message.end, message.reason or "")

    def _question(self, run_id: str) -> _Question:
        found = self._questions.get(run_id)
        if found is None:
            found = self._questions[run_id] = _Question()
            while len(self._questions) > self._remember:
                gone, _ = self._questions.popitem(last=False)
                self._merged.pop(gone, None)
        return found

    def _decide(self, run_id: str, verdict: Turn | NotStarted) -> None:
        question = self._question(run_id)
        if question.verdict is not None:
            return
        question.verdict = verdict
        for waiter in question.waiters:
            if not waiter.done():
                waiter.set_result(None)

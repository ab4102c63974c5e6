"""X12 — a conversation's queue and its policy, as pure decisions.

A conversation's questions are either *running* (their turn came; until their run ends) or
*queued* (waiting, in the order they will start). :func:`decide` says what a newly admitted
question does under its policy (:data:`imprint.contracts.conversation.ConversationPolicy`);
:func:`after_end` which queued question starts once a run ended; :func:`cancel` and
:func:`send_now` what the user's requests do. Each returns a typed decision; the
:class:`~imprint.journal.conversation.Conversation` aggregate records it as facts, and
:mod:`imprint.journal.queueing` closes or stops the runs it names.

Why these choices:

* one queued question starts at a time, and only when nothing is running: ``enqueue`` means
  "after every question before it ended", and a question started under ``concurrent`` is
  running too;
* ``interrupt`` (and a send-now) puts the question at the *front* of the queue and stops
  what is running; it starts once that ended, never beside it;
* ``merge`` folds into the newest queued question (the one the user is still adding to);
  ``steer`` into the newest running one; with nothing to fold or steer into, both queue;
* a question that started can no longer be cancelled or sent now: a refusal, not a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from imprint.journal.refusals import Refusal, RefusalCode


@dataclass(frozen=True, slots=True)
class Queue:
    """A conversation's questions (run ids) that have not ended."""

    running: tuple[str, ...] = ()
    queued: tuple[str, ...] = ()

    def holds(self, run_id: str) -> bool:
        return run_id in self.running or run_id in self.queued

    def without(self, run_id: str) -> Queue:
        return Queue(tuple(r for r in self.running if r != run_id), tuple(r for r in self.queued if r != run_id))

    def started(self, run_id: str) -> Queue:
        return Queue((*self.running, run_id), tuple(r for r in self.queued if r != run_id))


@dataclass(frozen=True, slots=True)
class Start:
    """The question starts now."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Enqueue:
    """The question waits; at the front of the queue (``interrupt``) or at its end."""

    run_id: str
    front: bool = False


@dataclass(frozen=True, slots=True)
class Interrupt:
    """``interrupt``: the running questions are stopped because of ``run_id``, which waits at
    the front of the queue until they ended."""

    run_id: str
    running: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refuse:
    """``reject``: the question is refused; ``busy`` names what was running or queued."""

    run_id: str
    busy: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Merge:
    """``merge``: folded into the queued ``into``."""

    run_id: str
    into: str


@dataclass(frozen=True, slots=True)
class Steer:
    """``steer``: handed to the running ``into``."""

    run_id: str
    into: str


Decision = Start | Enqueue | Interrupt | Refuse | Merge | Steer


def decide(queue: Queue, run_id: str, policy: str) -> Decision:
    """What a newly admitted question ``run_id`` does under ``policy``."""
    if policy == "concurrent" or not (queue.running or queue.queued):
        return Start(run_id)
    if policy == "reject":
        return Refuse(run_id, (*queue.running, *queue.queued))
    if policy == "interrupt":
        return Interrupt(run_id, queue.running) if queue.running else Enqueue(run_id, front=True)
    if policy == "merge" and queue.queued:
        return Merge(run_id, queue.queued[-1])
    if policy == "steer" and queue.running:
        return Steer(run_id, queue.running[-1])
    return Enqueue(run_id)


def enqueued(queue: Queue, run_id: str, front: bool) -> Queue:
    return replace(queue, queued=(run_id, *queue.queued) if front else (*queue.queued, run_id))


def next_to_start(queue: Queue) -> str | None:
    """The queued question whose turn came: the first, once nothing is running."""
    return queue.queued[0] if queue.queued and not queue.running else None


def check_waiting(queue: Queue, run_id: str, request: str, ended: str | None = None) -> None:
    """A user's request about ``run_id`` (cancel, send now) applies to a queued question only
    (``ended``: how the question ended, if it did)."""
    if run_id in queue.queued:
        return
    if run_id in queue.running:
        raise Refusal(RefusalCode.QUESTION_STARTED, f"{request}: the question already started")
    if ended is not None:
        raise Refusal(RefusalCode.QUESTION_ENDED, f"{request}: the question already ended ({ended})")
    raise Refusal(RefusalCode.QUESTION_NOT_QUEUED, f"{request}: no such question waits in the conversation")


def check_turn(queue: Queue, run_id: str) -> None:
    """``run.started`` of a question still queued is refused: its turn has not come."""
    if run_id in queue.queued:
        raise Refusal(RefusalCode.NOT_ITS_TURN, "run.started while questions before it have not ended")

"""X2 — the closed run lifecycle, as one transition table.

::

    (not admitted) ──run.admitted──▶ admitted
    admitted ──▶ queued | rejected | throttled | stopped | failed
    queued   ──▶ running | throttled | stopped | failed
    running  ──▶ completed(+ exactly one outcome) | stopped | failed | throttled
    completed, stopped, failed, throttled, rejected: terminal, no way out

Why these shortcuts and no others:

* ``admitted → rejected`` — rejection is the admission verdict (policy, quota of
  the account); once a run is queued it was accepted, so ``queued → rejected`` is
  illegal.
* ``admitted → throttled`` / ``queued → throttled`` / ``running → throttled`` —
  rate limits may bite at admission, while waiting, or mid-generation (provider).
* ``admitted → stopped`` / ``queued → stopped`` / ``running → stopped`` — the user
  may cancel at any time before a terminal state.
* ``admitted → failed`` / ``queued → failed`` / ``running → failed`` — infrastructure
  can fail at any stage.
* ``completed`` only from ``running``: nothing completes without having run, and
  ``admitted → running`` (skipping the queue) is illegal too.

Only ``completed`` carries an outcome, exactly one of
``answered | insufficient_evidence | generation_unavailable | declined``.

Re-entering the current state (a second ``run.queued`` with another event_id) is
illegal. An exact redelivery (same event_id) never reaches this table: the
aggregate treats it as a no-op before any check.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from imprint.journal.refusals import Refusal, RefusalCode


class State(StrEnum):
    ADMITTED = "admitted"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    STOPPED = "stopped"
    FAILED = "failed"
    THROTTLED = "throttled"
    REJECTED = "rejected"


OUTCOMES: Final = frozenset({"answered", "insufficient_evidence", "generation_unavailable", "declined"})
TERMINAL: Final = frozenset({State.COMPLETED, State.STOPPED, State.FAILED, State.THROTTLED, State.REJECTED})
LIVE: Final = frozenset({State.ADMITTED, State.QUEUED, State.RUNNING})

TRANSITIONS: Final[dict[State | None, frozenset[State]]] = {
    None: frozenset({State.ADMITTED}),
    State.ADMITTED: frozenset({State.QUEUED, State.REJECTED, State.THROTTLED, State.STOPPED, State.FAILED}),
    State.QUEUED: frozenset({State.RUNNING, State.THROTTLED, State.STOPPED, State.FAILED}),
    State.RUNNING: frozenset({State.COMPLETED, State.STOPPED, State.FAILED, State.THROTTLED}),
    State.COMPLETED: frozenset(),
    State.STOPPED: frozenset(),
    State.FAILED: frozenset(),
    State.THROTTLED: frozenset(),
    State.REJECTED: frozenset(),
}
"""The single source of truth for legal lifecycle edges."""

MESSAGE_TARGETS: Final[dict[str, State]] = {
    "run.admitted": State.ADMITTED,
    "run.queued": State.QUEUED,
    "run.started": State.RUNNING,
    "run.completed": State.COMPLETED,
    "run.stopped": State.STOPPED,
    "run.failed": State.FAILED,
    "run.throttled": State.THROTTLED,
    "run.rejected": State.REJECTED,
}
"""Which ``imprint.runtime.v1`` type asks for which state."""


RUNTIME_LOST: Final = "runtime_lost"
"""X10: the Journal closed the run ``failed`` when its runtime's lease lapsed."""
STOP_REQUESTED: Final = "stop_requested"
"""X11: the run ended ``stopped`` after its user asked it to stop."""
INTERRUPTED: Final = "interrupted"
"""X12: the run ended ``stopped`` because a newer question of its conversation interrupted it."""
CONVERSATION_BUSY: Final = "conversation_busy"
"""X12 ``reject``: the Journal closed the run ``rejected``: its conversation had a question live or queued."""
CANCELLED: Final = "cancelled"
"""X12: the Journal closed the queued run ``stopped``: its user cancelled the question."""
MERGED: Final = "merged"
"""X12 ``merge``: the Journal closed the run ``stopped``: its question is answered by the one it was merged into."""
STEERED: Final = "steered"
"""X12 ``steer``: the Journal closed the run ``stopped``: its question was handed to the running one."""
JOURNAL_REASONS: Final = frozenset({RUNTIME_LOST, STOP_REQUESTED, INTERRUPTED, CONVERSATION_BUSY, CANCELLED, MERGED,
                                    STEERED})
"""Transition reasons the Journal writes itself: fixed codes, stored and announced unsealed."""


def is_terminal(state: State | None) -> bool:
    return state in TERMINAL


def check_transition(current: State | None, target: State, outcome: str | None = None) -> None:
    """Raise a typed :class:`Refusal` unless ``current → target`` is legal and the outcome fits."""
    if current is None and target is not State.ADMITTED:
        raise Refusal(RefusalCode.NOT_ADMITTED, f"{target.value} before admission")
    if current is not None and target is State.ADMITTED:
        raise Refusal(RefusalCode.DUPLICATE_ADMISSION, f"already {current.value}")
    if current in TERMINAL:
        raise Refusal(RefusalCode.ALREADY_TERMINAL, f"{current.value} -> {target.value}")
    if target not in TRANSITIONS[current]:
        raise Refusal(RefusalCode.ILLEGAL_TRANSITION, f"{current.value if current else 'none'} -> {target.value}")
    if target is State.COMPLETED:
        if outcome not in OUTCOMES:
            raise Refusal(RefusalCode.OUTCOME_MISMATCH, f"completed needs one outcome, got {outcome!r}"[:200])
    elif outcome is not None:
        raise Refusal(RefusalCode.OUTCOME_MISMATCH, f"{target.value} carries no outcome")


def check_live_fact(current: State | None, fact: str) -> None:
    """Progress stages and evidence grants belong to a live run (admitted, queued or running)."""
    if current is None:
        raise Refusal(RefusalCode.NOT_ADMITTED, f"{fact} before admission")
    if current not in LIVE:
        raise Refusal(RefusalCode.FACT_OUT_OF_STATE, f"{fact} while {current.value}")

"""D5: how an execution is presented on refresh and in history.

Execution completed is not user received. A completed execution whose delivery is
still pending or was interrupted is shown conservatively: ``complete`` is false and
the display says what is missing, while the recorded outcome stays exactly what the
closed record says — never rewritten (e.g. to ``insufficient_evidence``)."""

from __future__ import annotations

from typing import Any, Literal

Display = Literal[
    "in_progress", "complete", "delivery_pending", "delivery_interrupted",
    "stopped", "failed", "throttled", "rejected", "unknown",
]

ACTIVE_STATES = frozenset({"admitted", "queued", "running"})


def presentation(*, state: str | None, outcome: str | None, delivery: str, closed: bool) -> dict[str, Any]:
    """``{"display", "complete", "outcome", "delivery"}`` for one run."""
    display: Display
    if state is None or state in ACTIVE_STATES:
        display = "in_progress"
    elif state == "completed":
        if not closed:
            display = "delivery_pending"  # the closed record is not persisted yet: nothing to deliver
        elif delivery == "completed":
            display = "complete"
        elif delivery == "interrupted":
            display = "delivery_interrupted"
        else:
            display = "delivery_pending"
    elif state in ("stopped", "failed", "throttled", "rejected"):
        display = state  # type: ignore[assignment]
    else:
        display = "unknown"
    return {
        "display": display,
        "complete": display == "complete",
        "outcome": outcome if state == "completed" else None,
        "delivery": delivery,
    }


def shown_answer_text(presented: dict[str, Any], text: str | None) -> str | None:
    """D5: the closed answer text a refresh or the history shows — only once its
    delivery completed (``presented`` is :func:`presentation`'s result); before that,
    nothing, so an interrupted or pending delivery never reads as a received answer."""
    return text if presented["complete"] else None

"""Typed refusals: why the journal did not apply a message.

A refusal is a *fact*: the journal records it (``Refused`` on the aggregate the
message was about) and never applies the refused change. Refusal details are
codes and identifiers only — never question, answer or evidence text (X9)."""

from __future__ import annotations

from enum import StrEnum


class RefusalCode(StrEnum):
    # X2 lifecycle
    NOT_ADMITTED = "not_admitted"
    """Anything but ``run.admitted`` (or a publication effect) for a run the journal never admitted."""
    DUPLICATE_ADMISSION = "duplicate_admission"
    """A second ``run.admitted`` (another event_id) for an already admitted run."""
    ILLEGAL_TRANSITION = "illegal_transition"
    """Not an edge of ``lifecycle.TRANSITIONS`` (e.g. admitted → running)."""
    ALREADY_TERMINAL = "already_terminal"
    """Any transition out of a terminal state (e.g. running after failed)."""
    CONTRADICTORY_COMPLETION = "contradictory_completion"
    """A second completion whose frozen record differs from the first (X4)."""
    DUPLICATE_COMPLETION = "duplicate_completion"
    """A second completion (another event_id) with an identical record: harmless, still not applied."""
    OUTCOME_MISMATCH = "outcome_mismatch"
    """An outcome on a non-completed state, or none on a completion."""
    FACT_OUT_OF_STATE = "fact_out_of_state"
    """A progress stage or evidence grant while the run is not live (before running / after terminal)."""
    # X3 conditions
    QCS_REUSED = "qcs_reused"
    """The qcs_id already identifies another execution's condition set."""
    QCS_SELF_INHERITANCE = "qcs_self_inheritance"
    """``inherits_from`` equals the set's own id: inheritance must create a new identity."""
    QCS_PARENT_UNKNOWN = "qcs_parent_unknown"
    QCS_CROSS_CONVERSATION = "qcs_cross_conversation"
    QCS_INHERITED_WITHOUT_PARENT = "qcs_inherited_without_parent"
    """A condition says ``source: inherited`` but the set names no parent."""
    # isolation and X8
    ACCOUNT_MISMATCH = "account_mismatch"
    CONVERSATION_DELETED = "conversation_deleted"
    EXECUTION_ERASED = "execution_erased"
    # X12 the conversation's queue
    QUESTION_STARTED = "question_started"
    """A cancel or send-now for a question that already started (or ended)."""
    QUESTION_ENDED = "question_ended"
    """A cancel or send-now for a question that already ended."""
    QUESTION_NOT_QUEUED = "question_not_queued"
    """A cancel or send-now for a run that is no question waiting in that conversation."""
    NOT_ITS_TURN = "not_its_turn"
    """``run.started`` for a question still queued behind others (X12)."""


class Refusal(Exception):
    """Raised by a domain check; the caller records it as a ``Refused`` fact."""

    def __init__(self, code: RefusalCode, detail: str = "") -> None:
        super().__init__(f"{code.value}: {detail}" if detail else code.value)
        self.code = code
        self.detail = detail[:200]

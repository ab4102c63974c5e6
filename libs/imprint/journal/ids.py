"""Deterministic aggregate ids: every journal aggregate is found from its natural key."""

from __future__ import annotations

from typing import Final
from uuid import UUID, uuid5

from imprint.ids import remembered

JOURNAL_NAMESPACE: Final = UUID("6f1d3c1e-2b7a-5e43-9a55-7d0c8e1f4a21")


@remembered
def execution_id(run_id: str) -> UUID:
    """``AnswerExecution`` id: uuid5 of the run id."""
    return uuid5(JOURNAL_NAMESPACE, f"run:{run_id}")


@remembered
def conversation_id(conversation: str) -> UUID:
    return uuid5(JOURNAL_NAMESPACE, f"conversation:{conversation}")


@remembered
def qcs_id(qcs: str) -> UUID:
    return uuid5(JOURNAL_NAMESPACE, f"qcs:{qcs}")


@remembered
def source_id(source: str) -> UUID:
    return uuid5(JOURNAL_NAMESPACE, f"source:{source}")


@remembered
def lease_shard_id(shard: int) -> UUID:
    """``LeaseShard`` id: uuid5 of the runtime partition number (X10)."""
    # "lease-lane:" is how logs spell this id since before the rename: changing it would lose their records.
    return uuid5(JOURNAL_NAMESPACE, f"lease-lane:{shard}")


def announcement_id(originator_id: UUID, version: int) -> UUID:
    """The deterministic ``event_id`` of what the journal announces for one stored event."""
    return uuid5(originator_id, f"announce:{version}")

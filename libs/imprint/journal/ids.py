"""Deterministic aggregate ids: every journal aggregate is found from its natural key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from uuid import UUID, uuid5

from imprint.ids import remembered

JOURNAL_NAMESPACE: Final = UUID("6f1d3c1e-2b7a-5e43-9a55-7d0c8e1f4a21")


def _named(kind: str, doc: str) -> Callable[[str | int], UUID]:
    """The id function of one kind of journal aggregate: uuid5 of ``"<kind>:<natural key>"``."""
    @remembered
    def aggregate_id(key: str | int) -> UUID:
        return uuid5(JOURNAL_NAMESPACE, f"{kind}:{key}")

    aggregate_id.__doc__ = doc
    return aggregate_id


execution_id = _named("run", "``AnswerExecution`` id: uuid5 of the run id.")
conversation_id = _named("conversation", "``Conversation`` id: uuid5 of the conversation id.")
qcs_id = _named("qcs", "``QcsIdentity`` id: uuid5 of the QCS id.")
source_id = _named("source", "``SourceLinks`` id: uuid5 of the source id.")
# "lease-lane" is how logs spell this id since before the shard was called a shard: changing it would lose their records.
lease_shard_id = _named("lease-lane", "``LeaseShard`` id: uuid5 of the runtime partition number (X10).")


def announcement_id(originator_id: UUID, version: int) -> UUID:
    """The deterministic ``event_id`` of what the journal announces for one stored event."""
    return uuid5(originator_id, f"announce:{version}")


def interruption_id(run_id: str, by_run_id: str) -> str:
    """X12: the one ``event_id`` of the stop request by which question ``by_run_id`` interrupts run
    ``run_id`` — recorded on the run, announced as its ``run.cancel_requested``, and named back by the
    runtime's ``run.stopped``: all three are the same fact."""
    return str(uuid5(JOURNAL_NAMESPACE, f"interrupt:{run_id}:{by_run_id}"))


def steer_id(run_id: str, steered_run_id: str) -> str:
    """X12: the one ``event_id`` of question ``steered_run_id`` handed to run ``run_id``."""
    return str(uuid5(JOURNAL_NAMESPACE, f"steer:{run_id}:{steered_run_id}"))

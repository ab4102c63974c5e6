"""P15 One commit, one transaction: what a commit that did not plainly succeed leaves.

The tracked unit of work says how a poll's commit ended; this module says what that
means for the candidates the poll settled (:class:`~imprint.publication.handling.SettledCandidate`):

* **refused** (the database said no: privileges, data, an internal error) — nothing was
  committed: a failure fact per candidate, recorded in the log when it is writable
  (:func:`record_failures`; the relay announces ``answer.save_failed`` once, with a
  deterministic id) and announced straight away only when it is not (:func:`save_failed`);
  the poll is retried;
* **lost a race after its previews went out** — the previews showed state that is not
  committed: the same failure fact, then the poll is retried on fresh state;
* **unconfirmed** (the connection was lost around ``COMMIT``) — ``answer.save_unknown``
  per candidate (:func:`save_unknown`), then the candidates are read back by identity
  (:func:`confirmed`): committed means done (the relay announces it), missing means the
  poll is retried. Never assumed either way.

A failed save never promotes a preview: Delivery drops a preview whose candidate failed
(P14, P16)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from imprint.contracts.publication import AnswerSaveFailed, AnswerSaveUnknown
from imprint.publication.aggregates import run_of
from imprint.publication.handling import SettledCandidate
from imprint.publication.run import PublicationRun
from imprint.workspace import Workspace

LOST_RACE = "integrity_error"
"""The error a failure fact names when the unit lost an optimistic-concurrency race."""


def record_failures(ws: Workspace, settled: Sequence[SettledCandidate], error: str) -> None:
    """A failure fact on each settled candidate's run (read back from the store: the failed
    events were never saved). Only the error's class name: a database message may quote
    private values."""
    for entry in settled:
        run_of(ws, entry.run_id).record_save_failure(entry.candidate_id, error, entry.block_ids)


def save_failed(settled: Sequence[SettledCandidate], error: str) -> list[AnswerSaveFailed]:
    """The failure facts as messages, when the log could not take them."""
    return [AnswerSaveFailed(run_id=entry.run_id, candidate_id=entry.candidate_id, block_ids=list(entry.block_ids),
                             error=error) for entry in settled]


def save_unknown(settled: Sequence[SettledCandidate]) -> list[AnswerSaveUnknown]:
    return [AnswerSaveUnknown(run_id=entry.run_id, candidate_id=entry.candidate_id, block_ids=list(entry.block_ids))
            for entry in settled]


def confirmed(settled: Sequence[SettledCandidate], stored_run: Callable[[str], PublicationRun | None]) -> bool:
    """Whether every candidate is committed, read back by its identity from the store."""
    for entry in settled:
        run = stored_run(entry.run_id)
        if run is None or run.settled(entry.candidate_id) is None:
            return False
    return True

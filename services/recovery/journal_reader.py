"""Reads the runtime journal's store read-only, for comparison (R2, R5, R7, P19).

The store is the journal's own eventsourcing log (tables ``journal_events``…, or
``journal.sqlite``), opened with ``CREATE_TABLE=n`` and no keyring: recovery reads
execution lifecycles, observed publication effects and tool receipts — none of them
sealed — and writes nothing. A deployment where no journal ever ran has no store
(``absent``): then the journal recorded nothing, and every committed block is
reported as unjournaled. A store that cannot be read is ``unavailable``, with the
reason; the report then says the journal was not consulted, never guesses.

What is read here is compared with the Publication log; it never feeds an answer
view (:mod:`imprint.recovery.journal_facts`)."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application

from imprint.journal.execution import AnswerExecution
from imprint.recovery.journal_facts import JournalAvailability, JournalRun
from services.common.backends import backend_for
from services.common.observability import get_logger
from services.common.event_log import stored
from services.common.settings import Settings

log = get_logger(__name__)
JOURNAL_STORE = "journal"


class _JournalStore(Application[UUID]):
    name = JOURNAL_STORE


def journal_run(execution: AnswerExecution | None, run_id: str) -> JournalRun:
    if execution is None:
        return JournalRun(run_id, found=False)
    return JournalRun(
        run_id=run_id,
        found=True,
        state=execution.state,
        outcome=execution.outcome,
        erased=execution.erased,
        transitions=tuple({"state": t.state, "at": t.at.isoformat(), "reason": t.reason}
                          for t in execution.transitions),
        effects=tuple({"kind": e.kind, "candidate_id": e.candidate_id, "block_id": e.block_id,
                       "revision": e.revision, "body_sha256": e.body_sha256, "receipt_id": e.receipt_id,
                       "log_position": e.log_position, "at": e.at.isoformat()} for e in execution.effects),
        receipts=tuple({"tool_call_id": r.tool_call_id, "status": r.status, "at": r.at.isoformat()}
                       for r in execution.receipts),
        refusals=tuple({"message_type": r.message_type, "code": r.code, "detail": r.detail, "at": r.at.isoformat()}
                       for r in execution.refusals),
        lapsed=getattr(execution, "lapsed", None),
        stop_requested=execution.stop_requested_at.isoformat() if execution.stop_requested_at else None,
    )


class JournalReader:
    """One read-only view of the journal's store for a recovery command; :meth:`close` it."""

    def __init__(self, settings: Settings) -> None:
        self.availability: JournalAvailability = "consulted"
        self.reason = ""
        self._store: _JournalStore | None = None
        try:
            backend = backend_for(settings)
            if not backend.has_log(JOURNAL_STORE):
                self.availability = "absent"
                self.reason = "no journal store in this deployment: the journal recorded nothing"
                return
            self._store = _JournalStore(env={**backend.environment(JOURNAL_STORE), "CREATE_TABLE": "n"})
        except Exception as error:  # noqa: BLE001 — reported, never guessed around
            self._unavailable(error)

    def _unavailable(self, error: Exception) -> None:
        log.warning("journal store unavailable", error=type(error).__name__)
        self.availability = "unavailable"
        self.reason = f"the journal's store could not be read: {type(error).__name__}"

    @property
    def consulted(self) -> bool:
        return self.availability != "unavailable"

    def run(self, run_id: str) -> JournalRun | None:
        """The journal's facts about ``run_id``; ``None`` when the journal cannot be read."""
        if self.availability == "absent":
            return JournalRun(run_id, found=False)
        if self._store is None:
            return None
        try:
            execution = stored(self._store, AnswerExecution.id_for(run_id))
        except AggregateNotFoundError:
            execution = None
        except Exception as error:  # noqa: BLE001
            self._unavailable(error)
            return None
        return journal_run(execution if isinstance(execution, AnswerExecution) else None, run_id)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

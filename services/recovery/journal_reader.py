"""Reads the runtime journal's store read-only, for comparison (R2, R5, R7, P19).

The store is the journal's own eventsourcing log (tables ``journal_events``…, or
``journal.sqlite``), opened with ``CREATE_TABLE=n`` and no keyring: recovery reads the
stored events of a run's execution — its lifecycle, observed publication effects and tool
receipts, none of them sealed — and folds them through the table of
:class:`~imprint.recovery.journal_facts.ExecutionFold`, one row per stored event type; it
writes nothing. A deployment where no journal ever ran has no store
(``absent``): then the journal recorded nothing, and every committed block is
reported as unjournaled. A store that cannot be read is ``unavailable``, with the
reason; the report then says the journal was not consulted, never guesses.

What is read here is compared with the Publication log; it never feeds an answer
view (:mod:`imprint.recovery.journal_facts`)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import Application

from imprint.journal.conversation import Conversation
from imprint.journal.execution import AnswerExecution
from imprint.recovery.conversation import ConversationFold
from imprint.recovery.journal_facts import ExecutionFold, JournalAvailability, JournalRun
from services.common.backends import backend_for
from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)
JOURNAL_STORE = "journal"


class _JournalStore(Application[UUID]):
    name = JOURNAL_STORE


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
        events = self._events(AnswerExecution.id_for(run_id))
        return None if events is None else ExecutionFold.of(run_id, events)

    def conversation(self, conversation_id: str) -> dict[str, Any] | None:
        """X12: the conversation's questions, policies and outcomes
        (:mod:`imprint.recovery.conversation`); ``None`` when the journal cannot be read."""
        events = self._events(Conversation.id_for(conversation_id))
        return None if events is None else ConversationFold.of(conversation_id, events)

    def _events(self, aggregate_id: UUID) -> list[Any] | None:
        """The stored events of one aggregate (none in a deployment without a journal store);
        ``None`` when the store cannot be read."""
        if self.availability == "absent":
            return []
        if self._store is None:
            return None
        try:
            return list(self._store.events.get(aggregate_id))
        except Exception as error:  # noqa: BLE001
            self._unavailable(error)
            return None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

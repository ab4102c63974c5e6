"""Read side of the journal for the HTTP layer (``GET /v1/runs/{id}``, ``GET /v1/conversations/{id}/history``).

Both reads return ``None`` for an unknown id *and* for another account's id, so
the HTTP layer answers 404 in both cases (D6). Nothing here recomputes: views are
projections of stored facts (``imprint.journal.history``). Delivery state is an
input (D5) — pass what Delivery observed per run; a run without an entry is
``pending`` and a completed execution is then shown conservatively.
"""

from __future__ import annotations

from collections.abc import Mapping

from imprint.journal.history import (
    BindingMismatch,
    ExecutionNotFound,
    FrozenRecordMismatch,
    PublicMessage,
    project_execution,
    resolve_execution,
)
from imprint.shredding import FieldSealer, ScopedKeyring
from imprint.journal.views import ConversationHistory, DeliveryState, ExecutionView, HistoryItem
from services.journal.application import RuntimeJournal


class JournalQueries:
    def __init__(self, journal: RuntimeJournal) -> None:
        self.journal = journal

    def _sealer(self) -> FieldSealer:
        """One key fetch per conversation per request."""
        return FieldSealer(ScopedKeyring(self.journal.keyring))

    def execution(
        self,
        run_id: str,
        account_id: str,
        delivery_state: DeliveryState = "pending",
        public_message: PublicMessage | None = None,
    ) -> ExecutionView | None:
        """The X2 state, the frozen outcome and a display fit for ``delivery_state``.
        Raises ``FrozenRecordMismatch`` if ``public_message`` disagrees with the frozen record (X5)."""
        ex = self.journal.execution(run_id)
        if ex is None or ex.request is None or ex.request.account_id != account_id:
            return None
        return project_execution(ex, self._sealer(), delivery_state, public_message)

    def history(
        self,
        conversation_id: str,
        account_id: str,
        delivery_states: Mapping[str, DeliveryState] | None = None,
        public_messages: Mapping[str, PublicMessage] | None = None,
    ) -> ConversationHistory | None:
        """The conversation's messages in order, each resolved through the verified lookup index.

        ``delivery_states``: run_id → what Delivery observed. ``public_messages``: message_id → what a
        client was shown, checked against the frozen record. A failed check or a tampered index entry
        becomes an ``integrity_error`` item with no content — surfaced, never repaired."""
        conv = self.journal.conversation(conversation_id)
        if conv is None or conv.account_id != account_id:
            return None
        if conv.deleted:
            return ConversationHistory(conversation_id=conversation_id, account_id=account_id, deleted=True)
        sealer = self._sealer()
        states = delivery_states or {}
        publics = public_messages or {}
        items: list[HistoryItem] = []
        for message_id in conv.message_ids():
            try:
                ex = resolve_execution(self.journal.message_index, conversation_id, message_id, self.journal.execution)
                view = project_execution(ex, sealer, states.get(ex.run_id, "pending"), publics.get(message_id))
            except ExecutionNotFound as e:
                items.append(HistoryItem(message_id=message_id, status="not_found", error=e.code))
            except (BindingMismatch, FrozenRecordMismatch) as e:
                items.append(HistoryItem(message_id=message_id, status="integrity_error", error=e.code))
            else:
                items.append(HistoryItem(message_id=message_id, status="ok", execution=view))
        return ConversationHistory(conversation_id=conversation_id, account_id=account_id, items=items)

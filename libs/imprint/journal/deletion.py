"""X8: deleting a conversation in the Journal — its key destroyed first, its tombstone, its
executions erased — whether a user asked (``conversation.delete_requested``), the retention
sweep found it idle, or an operator deleted it.

Side effect before commit, on purpose: the key is destroyed before the unit commits. If the
transaction then fails, the key is already gone — the conversation is unreadable, never
half-readable — and the redelivered request finishes the tombstone."""

from __future__ import annotations

from uuid import uuid5

from imprint.journal import ids
from imprint.journal.conversation import Conversation, DeletionReason
from imprint.journal.effects import NOTHING, Effects, IndexIntent, execution_of
from imprint.journal.keys import JournalKeys
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.workspace import Workspace


def delete_conversation(
    ws: Workspace,
    keys: JournalKeys,
    conversation_id: str,
    account_id: str,
    event_id: str,
    reason: DeletionReason,
    message_type: str = "conversation.delete_requested",
) -> Effects:
    """X8: the key destroyed, the conversation tombstoned, its executions erased (also what
    a retention sweep and an operator's deletion do)."""
    conv = ws.get(Conversation, ids.conversation_id(conversation_id))
    if conv is not None and event_id in conv.processed:
        return NOTHING
    if conv is not None and conv.account_id != account_id:
        conv.refuse(event_id, message_type, Refusal(RefusalCode.ACCOUNT_MISMATCH, "conversation belongs to another account"))
        return NOTHING
    keys.keyring.destroy(conversation_id)  # first: from here on nothing of it can be read or sealed
    if conv is None:
        conv = Conversation(conversation_id, account_id)
        ws.add(conv)
    conv.delete(event_id, reason)
    for run_id in dict.fromkeys(conv.run_ids):
        ex = execution_of(ws, run_id, create=False)
        if ex is not None:
            ex.erase(event_id, reason)
    return Effects(index=(IndexIntent("drop", conversation_id),))


def retention_event_id(conversation_id: str, last_activity_iso: str) -> str:
    """Deterministic id of a retention deletion, so a repeated sweep is a no-op."""
    return str(uuid5(ids.conversation_id(conversation_id), f"retention:{last_activity_iso}"))

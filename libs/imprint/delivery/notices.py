"""D7: notices after the end — what a withdrawal tells the clients of a run that already
ended, and when one is born.

A run's stream ends with ``done`` and nothing follows it (D3), so a block withdrawn
after that (P21: its source revoked or tombstoned) cannot reach an open client as a
frame of the run. Delivery strips the block's frames (a client replaying the run never
sees it) and gives the run's **conversation** a notice instead: one entry of a
resumable per-conversation stream (``GET /v1/conversations/{id}/notices``) that every
open client of the conversation follows, with ids 1, 2, 3, … per conversation.

A notice carries only what a client needs to mark the block withdrawn in place: the
run, the block, the revision the client was shown, and the cause from Publication's
fixed vocabulary — never the source, its title or any body (D6). A notice is born
only for a block a client could have been shown (it was displayed before the message
that hid it) in a run whose conversation Delivery knows; it is never a second copy of
a frame (before ``done`` the withdrawal travels in the run's own stream).

Pure: :func:`withdrawn_after_end` decides, :class:`Notice` is what the store numbers and
keeps, :meth:`Notice.payload` is what a client receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOTICE_EVENT = "notice"
"""The SSE event of a notice (its ``id`` is the notice's id in its conversation)."""
WITHDRAWN = "withdrawn"
"""A notice's ``kind``: the block is no longer shown."""
CAUSES = frozenset({"source_revoked", "source_tombstoned", "conversation_deleted", "source_rejected"})
"""Causes a client may read (P21's vocabulary, and a source rejection, which never names
the source either). Anything else reads as ``withdrawn``."""


@dataclass(frozen=True, slots=True)
class Notice:
    """A withdrawal after the end, before the store gives it its id in the conversation."""

    run_id: str
    conversation_id: str
    block_id: str
    revision: int
    """The revision clients were shown when the block was withdrawn."""
    cause: str

    def payload(self, notice_id: int, at: str) -> dict[str, Any]:
        """What a client receives (client-safe, D6)."""
        return {"notice_id": notice_id, "kind": WITHDRAWN, "run_id": self.run_id, "block_id": self.block_id,
                "revision": self.revision, "cause": self.cause, "at": at}


def client_cause(cause: str | None) -> str:
    return cause if cause in CAUSES else WITHDRAWN


def withdrawn_after_end(*, run_id: str, conversation_id: str | None, block_id: str,
                        shown: dict[str, Any] | None, cause: str | None) -> Notice | None:
    """The notice of a block hidden after the run's ``done``: ``shown`` is the entry clients
    were displaying just before (``None``: nothing was shown, nothing to tell), ``cause`` the
    block's hiding cause. A run without a conversation has no stream to carry it."""
    if shown is None or conversation_id is None:
        return None
    return Notice(run_id=run_id, conversation_id=conversation_id, block_id=block_id,
                  revision=int(shown.get("revision") or 0), cause=client_cause(cause))

"""X8: the keys a Journal unit of work seals private fields under — one per conversation,
fetched once per unit (:class:`imprint.shredding.ScopedKeyring`), a destroyed key a refusal.

Side effect before commit, on purpose: deletion destroys the conversation key first. If the
transaction then fails, the key is already gone — the conversation is unreadable, never
half-readable — and the redelivered request finishes the tombstone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from imprint.contracts.runtime import RunAdmitted
from imprint.journal.execution import AnswerExecution
from imprint.journal.refusals import Refusal, RefusalCode
from imprint.shredding import FieldSealer, KeyDestroyed, Keyring, ScopedKeyring


class JournalKeys:
    """A keyring and the sealer over it."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring
        self.sealer = FieldSealer(keyring)

    def scoped(self, messages: Iterable[Any] = ()) -> JournalKeys:
        """The keys of one unit of work: each conversation's key fetched once; the keys the
        unit's admissions will seal under created where missing and read, all at once (over a
        keyring that reads and creates many keys at once, :class:`imprint.shredding.BulkKeyring`)."""
        base = self.keyring.inner if isinstance(self.keyring, ScopedKeyring) else self.keyring
        scoped = ScopedKeyring(base)
        scoped.prepare(m.conversation_id for m in messages if isinstance(m, RunAdmitted))
        return JournalKeys(scoped)

    def seal(self, ex: AnswerExecution, field: str, text: str | None) -> str | None:
        """Seal a private field of an admitted execution; ``KeyDestroyed`` becomes a refusal."""
        if text is None:
            return None
        assert ex.request is not None
        try:
            return self.sealer.seal(ex.request.conversation_id, ex.run_id, field, text)
        except KeyDestroyed as e:
            raise Refusal(RefusalCode.CONVERSATION_DELETED, "conversation key destroyed") from e

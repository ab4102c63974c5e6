"""The Publication service's keys: the conversation keys its own sealing uses, remembered.

:class:`RecentKeys` stands in front of the shared key table (``services.common.keyring``) for
the service's :class:`~services.publication.sealing.SealingMapper`, so sealing a poll's bodies
costs one lookup per conversation, not one per body (X8: a key destroyed here is forgotten at
once). The relay does not use it: it reads each batch's keys afresh
(:class:`~services.publication.sealing.BatchOpener`)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from imprint.shredding import BulkKeyring


MAX_REMEMBERED_KEYS = 100_000
"""More conversations than this remembered at once and :class:`RecentKeys` starts over (a
bound on memory; the next poll's :meth:`RecentKeys.prepare` reads its keys back in one query)."""


class RecentKeys:
    """A keyring in front of the key table that remembers found keys for ``max_age``
    seconds: sealing a poll's bodies costs one lookup per conversation, not one per
    body. A key destroyed here is forgotten at once; one destroyed by another process
    may still be used here for at most ``max_age`` seconds.

    When a remembered key is found too old, every other remembered key that is too old
    and was used in the last ``keep`` seconds is read again with it, in one query: the
    busy conversations' keys then age together, and a poll pays one read per ``max_age``,
    not one per conversation whose key happened to expire."""

    def __init__(self, keyring: BulkKeyring, max_age: float = 1.0, keep: float = 10.0) -> None:
        self._keyring = keyring
        self._max_age = max_age
        self._keep = keep
        self._keys: dict[str, tuple[float, bytes, float]] = {}
        """conversation id → (read at, key, last used at)."""

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        now = time.monotonic()
        found = self._keys.get(conversation_id)
        if found is not None and now - found[0] >= self._max_age:
            self._refresh(now)
            found = self._keys.get(conversation_id)
        if found is not None and now - found[0] < self._max_age:
            self._keys[conversation_id] = (found[0], found[1], now)
            return found[1]
        key = self._keyring.key_for(conversation_id, create)
        if key is not None:
            self._remember(conversation_id, key, now)
        return key

    def prepare(self, conversation_ids: Iterable[str]) -> None:
        """Have the keys a unit is about to seal under, creating the missing ones, in a few
        round trips for the whole unit: the keys not remembered are read in one query (with
        every remembered key due for a refresh, when one of the unit's is), and the missing
        ones created in one transaction and read again. Without it a poll over many
        conversations each seen for the first time (or again after a pause longer than
        ``keep``) paid a read, an insert and a read again for each one. A destroyed
        conversation gets no key here; sealing under it still raises ``KeyDestroyed``
        (through :meth:`key_for`)."""
        now = time.monotonic()
        wanted = set(conversation_ids)
        due = False
        for conversation_id in wanted:
            found = self._keys.get(conversation_id)
            if found is not None:
                self._keys[conversation_id] = (found[0], found[1], now)  # in use: a refresh keeps it
                due = due or now - found[0] >= self._max_age
        unknown = [c for c in wanted if c not in self._keys]
        if due:
            self._refresh(now, also=unknown)
        elif unknown:
            self._store(self._keyring.keys_for(unknown), now)
        missing = [c for c in wanted if c not in self._keys]
        if missing:
            self._keyring.create_keys(missing)
            self._store(self._keyring.keys_for(missing), now)

    def _store(self, keys: dict[str, bytes | None], now: float) -> None:
        for conversation_id, key in keys.items():
            if key is not None:
                self._remember(conversation_id, key, now)

    def _remember(self, conversation_id: str, key: bytes, now: float) -> None:
        self._keys[conversation_id] = (now, key, now)
        if len(self._keys) > MAX_REMEMBERED_KEYS:
            self._keys.clear()

    def _refresh(self, now: float, also: Sequence[str] = ()) -> None:
        """Read again, in one query, every remembered key too old to use that was used in the
        last ``keep`` seconds (and the keys named in ``also``); forget the other old ones."""
        stale = [name for name, (read_at, _, used_at) in self._keys.items() if now - read_at >= self._max_age]
        wanted = [name for name in stale if now - self._keys[name][2] < self._keep]
        fresh = self._keyring.keys_for([*wanted, *also]) if wanted or also else {}
        for name in stale:
            key = fresh.get(name)
            if key is None:  # destroyed, or not used lately
                del self._keys[name]
            else:
                self._keys[name] = (now, key, self._keys[name][2])
        self._store({name: fresh.get(name) for name in also}, now)

    def destroy(self, conversation_id: str) -> None:
        self._keys.pop(conversation_id, None)
        self._keyring.destroy(conversation_id)

    def is_destroyed(self, conversation_id: str) -> bool:
        return self._keyring.is_destroyed(conversation_id)

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        """A fresh read of the table (the relay's per-batch keys), never from this cache."""
        return self._keyring.keys_for(conversation_ids)  # type: ignore[attr-defined, no-any-return]

"""X8 for the Publication log: block bodies enter the log only as ciphertext.

:class:`SealingMapper` is the application's eventsourcing ``Mapper``. Before an
event (or snapshot) of a bound aggregate is transcoded, every ``markdown`` string
in its state is replaced by ``{"__sealed__": <AES-GCM ciphertext>, "__key__": <key
name>}`` under the data key of the run's conversation (``run:<run_id>`` until the
conversation is known). Decoding opens them again; once the key is destroyed the
body reads as :data:`REMOVED` and everything else in the log — ids, revisions,
hashes, receipts, withdrawals — stays readable and auditable.

Each stored commit also carries a proof (:mod:`imprint.publication.proof`): a keyed MAC,
under the same conversation key, over its block as served, kept under :data:`PROOF` beside
the event's fields. A reader that holds the key checks it (:meth:`BatchDecoder.proven`) and
serves a record that proves itself without examining it field by field; the relay never
needs it, and a log written before proofs reads as it always did.

The keys are the shared per-conversation keys of ``services.common.keyring``; the
cipher and the MAC are :class:`~imprint.shredding.FieldSealer`'s (one home
for the crypto)."""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from imprint.publication.proof import PROOF_CONTEXT, Proven, commit_proof, proof_subject, served_form
from imprint.shredding import BulkKeyring, FieldSealer, Shredded

PRIVATE_FIELDS = frozenset({"markdown"})
SEALED, KEY = "__sealed__", "__key__"
PROOF, PROOF_MAC = "__proof__", "__mac__"
"""Where a stored commit keeps its proof (:mod:`imprint.publication.proof`): the MAC and the
name of the key it was made under, beside the event's own fields. An event read by code
that predates proofs carries it as one more attribute, which nothing reads."""
REMOVED = "⟨removed: this conversation was deleted⟩"
UNREADABLE = "⟨unreadable⟩"


_CONTAINERS = (dict, list)
"""What :meth:`SealingMapper._sealed` descends into (a tuple built once, not a union per value)."""


class SealingMapper(Mapper[uuid.UUID]):
    def __init__(self, transcoder: Transcoder, sealer: FieldSealer,
                 seal_paths: dict[str, tuple[SealPath, ...]] | None = None) -> None:
        super().__init__(transcoder)
        self.sealer = sealer
        self._keys: dict[uuid.UUID, str] = {}
        self._last_scope: tuple[object, str] = (None, "")
        self.seal_paths = seal_paths if seal_paths is not None else {}
        """Per event topic, where its seals sat the last time one was read (see
        :meth:`to_domain_event`); shared by the per-batch openers of one reader."""

    def bind(self, originator_id: uuid.UUID, key_name: str) -> None:
        """Seal the private fields of this aggregate's events under ``key_name`` from now on."""
        self._keys[originator_id] = key_name

    def to_stored_event(self, domain_event: DomainEventProtocol[uuid.UUID]) -> StoredEvent:
        key_name = self._keys.get(domain_event.originator_id)
        if key_name is None:
            return super().to_stored_event(domain_event)
        state = vars(domain_event)
        scope = str(domain_event.originator_id)
        sealed_state = self._sealed(state, key_name, scope)
        if sealed_state is state:  # nothing private in it
            return super().to_stored_event(domain_event)
        proof = commit_proof(self.sealer, key_name, scope, domain_event)
        if proof is not None:
            sealed_state[PROOF] = {KEY: key_name, PROOF_MAC: proof}
        sealed = object.__new__(type(domain_event))
        object.__setattr__(sealed, "__dict__", sealed_state)
        return super().to_stored_event(sealed)

    def to_domain_event(self, stored_event: StoredEvent, seals: int | None = None) -> DomainEventProtocol[uuid.UUID]:
        """The event with its seals opened in place (the state was decoded just now and
        nothing else holds it). ``seals``: how many seals its stored bytes hold, when the
        caller has counted them already.

        Finding the seals does not walk the whole state when the stored bytes are plain
        JSON: they say how many seals there are (``"__sealed__"`` is a key only a seal
        has), none means nothing to open, and the places where this topic's seals sat
        last time are tried first. Only when those do not account for every seal is the
        state walked (and the places found are remembered for the topic)."""
        domain_event = super().to_domain_event(stored_event)
        state, scope = vars(domain_event), self.scope_of(stored_event.originator_id)
        if self.compressor is not None or self.cipher is not None:
            self._open_within(state, scope, "", [], None)
            return domain_event
        if seals is None:
            seals = stored_event.state.count(SEAL_MARK)
        if not seals:
            return domain_event
        known = self.seal_paths.get(stored_event.topic, ())
        opened = [path for path in known if self._open_at(state, scope, path)]
        if len(opened) < seals:
            found: list[SealPath] = []
            self._open_within(state, scope, "", [], found)
            opened.extend(found)
            self.seal_paths[stored_event.topic] = tuple(opened[:MAX_SEAL_PATHS])
        return domain_event

    def scope_of(self, originator_id: uuid.UUID) -> str:
        """:func:`scope_of`, for a reader that decodes one stream's events one after another
        (a replay's page of runs: one id object per stream) remembered for the last stream
        without hashing its id."""
        last = self._last_scope
        if last[0] is originator_id:
            return last[1]
        scope = scope_of(originator_id)
        self._last_scope = (originator_id, scope)  # one tuple: a reading thread sees a pair, never half of one
        return scope

    def _sealed(self, container: dict[str, Any] | list[Any], key_name: str, scope: str) -> Any:
        """``container`` with every private string in it sealed (the field is its key): a
        new container wherever something was sealed, the same object wherever nothing was,
        so the event itself is never changed and a state without bodies is not copied."""
        copy: Any = None
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for k, v in items:
            if isinstance(v, _CONTAINERS):
                new: Any = self._sealed(v, key_name, scope)
                if new is v:
                    continue
            elif k in PRIVATE_FIELDS and isinstance(v, str):  # a list's index is never a private field
                new = {SEALED: self.sealer.seal(key_name, scope, k, v), KEY: key_name}
            else:
                continue
            if copy is None:
                copy = dict(container) if isinstance(container, dict) else list(container)
            copy[k] = new
        return container if copy is None else copy

    def _open_within(self, container: dict[str, Any] | list[Any], scope: str, field: str,
                     path: list[str | int], found: list[SealPath] | None) -> None:
        """Replace every sealed value inside ``container`` (at ``path``) by its plaintext
        (or marker), in place, descending only into dicts and lists, and add each seal's
        path to ``found``. A seal's field is the key it is stored under (an item of a
        list: the list's key)."""
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for k, v in items:
            if isinstance(v, dict):
                name = k if isinstance(k, str) else field
                if _is_seal(v):
                    container[k] = self._opened(v, scope, name)  # type: ignore[index]
                    if found is not None:
                        found.append((*path, k))
                else:
                    self._open_within(v, scope, name, [*path, k], found)
            elif isinstance(v, list):
                self._open_within(v, scope, k if isinstance(k, str) else field, [*path, k], found)

    def _open_at(self, state: dict[str, Any], scope: str, path: SealPath) -> bool:
        """Open the seal at ``path`` if there is one; its field is the last key on the way."""
        container: Any = state
        for step in path[:-1]:
            try:
                container = container[step]
            except (KeyError, IndexError, TypeError):
                return False
            if not isinstance(container, dict | list):
                return False
        last = path[-1]
        try:
            value = container[last]
        except (KeyError, IndexError, TypeError):
            return False
        if not (isinstance(value, dict) and _is_seal(value)):
            return False
        container[last] = self._opened(value, scope, _field_of(path))
        return True

    def _opened(self, seal: dict[str, Any], scope: str, field: str) -> str:
        opened = self.sealer.open(seal[KEY], scope, field, seal[SEALED])
        if isinstance(opened, str):
            return opened
        return REMOVED if isinstance(opened, Shredded) else UNREADABLE


@functools.lru_cache(maxsize=4096)
def scope_of(originator_id: uuid.UUID) -> str:
    """The scope a stream's seals and proofs are bound to: its id as text (remembered: a
    reader opens a stream's events one after another, and formatting a UUID is not free)."""
    return str(originator_id)


SealPath = tuple[str | int, ...]
"""Where a seal sits in an event's state: dict keys and list indexes from the top."""
MAX_SEAL_PATHS = 16
SEAL_MARK = f'"{SEALED}"'.encode()
"""The bytes of a seal's key in a stored state: a key only a seal has."""


@functools.lru_cache(maxsize=1024)
def _field_of(path: SealPath) -> str:
    """A seal's field: the last key on its path (an item of a list: the list's key).
    Remembered per path: a topic's seals sit at the same few paths, so the field is
    not looked for again with a generator for every body."""
    return next((step for step in reversed(path) if isinstance(step, str)), "")


def _is_seal(value: dict[str, Any]) -> bool:
    return len(value) == 2 and SEALED in value and KEY in value


class _BatchKeys:
    """The keys one relay batch needs, read in one query before it is opened; a name the
    scan missed is asked for on its own (and remembered for the batch)."""

    def __init__(self, keyring: BulkKeyring, names: set[str]) -> None:
        self._keyring = keyring
        self._keys = keyring.keys_for(names) if names else {}

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        if create:  # the relay never seals; ask the table itself
            return self._keyring.key_for(conversation_id, create=True)
        if conversation_id not in self._keys:
            self._keys[conversation_id] = self._keyring.key_for(conversation_id)
        return self._keys[conversation_id]

    def destroy(self, conversation_id: str) -> None:
        self._keys[conversation_id] = None
        self._keyring.destroy(conversation_id)

    def is_destroyed(self, conversation_id: str) -> bool:
        return self._keyring.is_destroyed(conversation_id)


_KEY_NAME = re.compile(rb'"__key__"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _key_name(found: bytes) -> str:
    """A key name as the scan found it: JSON string content, unescaped only if escaped."""
    return json.loads(b'"' + found + b'"') if b"\\" in found else found.decode()


class BatchOpener:
    """How the Publication relay turns a batch of notifications into domain events: one key-table read for the
    batch, and each event's seals opened without walking its whole state.

    The bodies must go out in clear (``answer.published`` carries the committed block's
    markdown to Delivery), so they are opened — once per event, in the relay's reading
    thread, never on its event loop — but:

    * an event whose stored state holds no sealed field (admissions, grants, numbers,
      refusals, source facts, withdrawals, settlements…) is decoded by the plain mapper,
      with no walk over its state;
    * the conversation keys of the whole batch are read in **one** query
      (``keys_for``), found by scanning the stored bytes of each stream's first sealed
      event for ``"__key__"`` (a run's bodies are sealed under its conversation's key) — a
      name the scan misses (a run sealed under ``run:<id>`` before its conversation was
      known) is still looked up on its own, so the scan only saves round trips;
    * those keys live for one batch only: a key destroyed before the batch was read is
      never used, and one destroyed while it is being produced (milliseconds) is the
      same race as a relay that was a batch faster. The service's own sealing keeps its
      :class:`~services.publication.keys.RecentKeys`.
    """

    def __init__(self, mapper: Mapper[uuid.UUID], keyring: BulkKeyring) -> None:
        assert isinstance(mapper, SealingMapper)
        self._mapper = mapper
        self._keyring = keyring
        self._plain = Mapper(mapper.transcoder)
        # The byte scan reads JSON; a compressed or enciphered log is opened the slow way.
        self._scannable = mapper.compressor is None and mapper.cipher is None

    def __call__(self, stored: Sequence[StoredEvent]) -> list[DomainEventProtocol[uuid.UUID]]:
        return self.for_batch(stored)(stored)

    def for_batch(self, stored: Sequence[StoredEvent]) -> BatchDecoder:
        """A decoder holding the keys of every seal in ``stored`` (read in one query), for
        ``stored`` or any part of it. A replay reads a page of runs at once and decodes it
        one run at a time, each run folded and viewed right after: its events are then
        still in the processor's caches."""
        names: set[str] = set()
        if self._scannable:
            scanned: set[uuid.UUID] = set()
            last: object = None  # the stream scanned last: a page of streams read together repeats its id object
            for s in stored:  # a stream's bodies share their conversation's key: one scan per stream
                if s.originator_id is not last and s.originator_id not in scanned and SEAL_MARK in s.state:
                    scanned.add(s.originator_id)
                    last = s.originator_id
                    names.update(_key_name(name) for name in _KEY_NAME.findall(s.state))
        # The batch's sealer, like its keys, lives for this batch only: it may keep each
        # key's cipher context.
        sealer = FieldSealer(_BatchKeys(self._keyring, names), purpose=self._mapper.sealer.purpose,
                             remember_ciphers=True)
        return BatchDecoder(SealingMapper(self._mapper.transcoder, sealer, self._mapper.seal_paths),
                            self._plain if self._scannable else None)


class BatchDecoder:
    """One batch's decoder (:meth:`BatchOpener.for_batch`): its events with their seals
    opened, and whether a commit's proof holds, under the batch's keys."""

    def __init__(self, opener: SealingMapper, plain: Mapper[uuid.UUID] | None) -> None:
        self._opener = opener
        self._plain = plain
        """The mapper for events with no seal in them (``None``: a compressed or enciphered
        log, whose bytes cannot be scanned: every event goes through the opener)."""

    def __call__(self, part: Sequence[StoredEvent]) -> list[DomainEventProtocol[uuid.UUID]]:
        opener, plain = self._opener, self._plain
        if plain is None:
            return [opener.to_domain_event(s) for s in part]
        events: list[DomainEventProtocol[uuid.UUID]] = []
        for s in part:  # each event's seals counted once: none is an event with nothing to open
            seals = s.state.count(SEAL_MARK)
            events.append(opener.to_domain_event(s, seals) if seals else plain.to_domain_event(s))
        return events

    def proven(self, event: object) -> Proven | None:
        """The commit's served form if the event carries a proof that holds under its key
        (R4: the record is what Publication committed); ``None`` for any other event —
        no proof, a proof that does not verify, a destroyed key — which is examined in full."""
        proof = getattr(event, PROOF, None)
        if not isinstance(proof, dict):
            return None
        form = served_form(event)
        if form is None:
            return None
        subject = proof_subject(form)
        key_name = proof.get(KEY)
        if not isinstance(key_name, str) or not self._opener.sealer.proves(
                key_name, self._opener.scope_of(event.originator_id), PROOF_CONTEXT, subject, proof.get(PROOF_MAC)):
            return None
        return Proven(form, subject)

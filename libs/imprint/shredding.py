"""X8 — crypto-shredding of private fields in an append-only log (shared by the Journal and Publication).

Private fields (question, normalized question, QCS conditions, answer text,
evidence excerpts, free-text failure/progress details) enter events **only** as
ciphertext: AES-256-GCM under a per-conversation data key, a fresh 96-bit nonce
per field, and associated data binding the ciphertext to
``(purpose, conversation_id, scope, field)`` — a ciphertext copied into another
run, conversation or field does not open.

Keys live outside the log in a small mutable table (``services.common.keyring``).
Destroying a conversation's key makes every ciphertext of it permanently
unreadable: the log stays append-only, the bodies are gone. After destruction
:meth:`FieldSealer.open` returns a :class:`Shredded` marker — never an exception —
so projections render "removed" instead of failing.

Sealed format (a plain ``str`` so it transcodes as JSON):
``esv1.<urlsafe-b64(nonce ‖ ciphertext ‖ tag)>``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import pybase64
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED_PREFIX: Final = "esv1."
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
URLSAFE: Final = b"-_"
"""The URL-safe alphabet's two characters, as pybase64's ``urlsafe_*`` pass them."""


class KeyDestroyed(Exception):
    """The conversation's data key was destroyed; nothing new may be sealed for it."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"data key of conversation {conversation_id!r} was destroyed")
        self.conversation_id = conversation_id


@runtime_checkable
class Keyring(Protocol):
    """Per-conversation data keys. General on purpose: Publication seals block bodies with it too.

    * ``key_for(cid, create=False)`` → the key, or ``None`` when there is none or it was destroyed.
    * ``key_for(cid, create=True)`` → the key, creating it atomically if missing;
      raises :class:`KeyDestroyed` if the conversation was shredded (a destroyed
      conversation never gets a fresh key).
    * ``destroy(cid)`` — idempotent; also marks a conversation that never had a key,
      so a later ``create`` is refused.
    * ``is_destroyed(cid)``.
    """

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None: ...

    def destroy(self, conversation_id: str) -> None: ...

    def is_destroyed(self, conversation_id: str) -> bool: ...


class BulkKeyring(Keyring, Protocol):
    """A keyring that reads, creates and checks many conversations' keys in one round trip
    each (a unit of work's admissions, a relay batch's bodies)."""

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        """Each conversation's key; ``None`` when it has none or it was destroyed."""
        ...

    def create_keys(self, conversation_ids: Iterable[str]) -> None:
        """A key for each conversation that has none (a destroyed one stays destroyed)."""
        ...

    def destroyed_among(self, conversation_ids: Iterable[str]) -> set[str]:
        """Which of these conversations' keys were destroyed."""
        ...


class InMemoryKeyring:
    """A keyring held in a dict (the memory backend, and tests of one process). Thread-safe."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes | None] = {}
        self._lock = threading.Lock()

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        with self._lock:
            if conversation_id in self._keys:
                key = self._keys[conversation_id]
                if key is None and create:
                    raise KeyDestroyed(conversation_id)
                return key
            if not create:
                return None
            key = self._keys[conversation_id] = new_data_key()
            return key

    def destroy(self, conversation_id: str) -> None:
        with self._lock:
            self._keys[conversation_id] = None

    def is_destroyed(self, conversation_id: str) -> bool:
        with self._lock:
            return conversation_id in self._keys and self._keys[conversation_id] is None

    def keys_for(self, conversation_ids: Iterable[str]) -> dict[str, bytes | None]:
        with self._lock:
            return {c: self._keys.get(c) for c in set(conversation_ids)}

    def create_keys(self, conversation_ids: Iterable[str]) -> None:
        with self._lock:
            for conversation_id in conversation_ids:
                if conversation_id not in self._keys:
                    self._keys[conversation_id] = new_data_key()

    def destroyed_among(self, conversation_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return {c for c in conversation_ids if c in self._keys and self._keys[c] is None}

    def close(self) -> None:
        pass


class ScopedKeyring:
    """A keyring view for one unit of work or one read: keys fetched once, destruction passed through.

    ``destroy`` evicts before destroying, ``is_destroyed`` asks the real keyring (but for the
    conversations :meth:`prepare` read for the unit), and a missing/destroyed key is never
    cached — so the only thing saved is repeated round trips. Keep its lifetime short (one
    batch, one request)."""

    def __init__(self, keyring: Keyring) -> None:
        self.inner = keyring
        self._keys: dict[str, bytes] = {}
        self._prepared: dict[str, bool] = {}
        """Conversations :meth:`prepare` read → whether their key was destroyed then."""

    def prepare(self, conversation_ids: Iterable[str]) -> None:
        """Create the missing keys of these conversations and read them all, in two round
        trips for the whole unit instead of several per conversation. What this scope then
        says of them is what the store said at this moment: a deletion committed later
        reaches the unit as a lost race on the conversation, which is redone with a new scope."""
        wanted = [c for c in dict.fromkeys(conversation_ids) if c not in self._prepared]
        if not wanted:
            return
        inner: BulkKeyring = self.inner  # type: ignore[assignment]
        inner.create_keys(wanted)
        for conversation_id, key in inner.keys_for(wanted).items():
            self._prepared[conversation_id] = key is None  # created just now, so None is destroyed
            if key is not None:
                self._keys[conversation_id] = key

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        key = self._keys.get(conversation_id)
        if key is None:
            key = self.inner.key_for(conversation_id, create)
            if key is not None:
                self._keys[conversation_id] = key
        return key

    def destroy(self, conversation_id: str) -> None:
        self._keys.pop(conversation_id, None)
        self._prepared.pop(conversation_id, None)
        self.inner.destroy(conversation_id)

    def is_destroyed(self, conversation_id: str) -> bool:
        prepared = self._prepared.get(conversation_id)
        return self.inner.is_destroyed(conversation_id) if prepared is None else prepared


@dataclass(frozen=True)
class Withheld:
    """A private field that cannot be shown. Falsy, so ``value or ""`` reads naturally."""

    field: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Shredded(Withheld):
    """The conversation's key was destroyed (deletion or retention): the body is gone."""


@dataclass(frozen=True)
class Unreadable(Withheld):
    """The ciphertext does not authenticate under the key (tampered or moved): withheld, not shown."""


Revealed = str | Withheld


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SEALED_PREFIX)


def associated_data(conversation_id: str, scope: str, field: str, purpose: str = "journal") -> bytes:
    return "\x1f".join(("imprint.field/v1", purpose, conversation_id, scope, field)).encode()


class FieldSealer:
    """Seals and opens private fields of one purpose (``journal``, ``publication``) with a keyring.

    The base64 of a seal is pybase64's (SIMD: the standard library's decoding is a large part
    of opening a short body). ``remember_ciphers``: keep each key's AES-GCM context for the
    sealer's life (its key schedule, and the MAC :meth:`prove` keys from it, already fed with
    its stream's associated data, are paid once, not per use) — only for a sealer that lives
    as long as its keyring's keys may be used, such as a relay's or a replay's sealer of one
    batch; a long-lived sealer would keep a destroyed key's context."""

    def __init__(self, keyring: Keyring, purpose: str = "journal", *, remember_ciphers: bool = False) -> None:
        self.keyring = keyring
        self.purpose = purpose
        self._ciphers: dict[bytes, AESGCM] | None = {} if remember_ciphers else None
        self._openings: dict[tuple[str, str, str], tuple[AESGCM, bytes]] | None = {} if remember_ciphers else None
        """(conversation, scope, field) → the cipher and associated data its seals open with:
        a reader opens every body of a stream under the same three."""
        self._proof_macs: dict[tuple[str, str, bytes], Any] | None = {} if remember_ciphers else None
        """(conversation, scope, context) → the keyed BLAKE2b already fed with its associated
        data: a reader checks every commit of a stream under the same three."""

    def _cipher(self, key: bytes) -> AESGCM:
        if self._ciphers is None:
            return AESGCM(key)
        cipher = self._ciphers.get(key)
        if cipher is None:
            cipher = self._ciphers[key] = AESGCM(key)
        return cipher

    def seal(self, conversation_id: str, scope: str, field: str, plaintext: str) -> str:
        """Encrypt ``plaintext``; creates the conversation key if needed. Raises :class:`KeyDestroyed`."""
        key = self.keyring.key_for(conversation_id, create=True)
        if key is None:  # a keyring that cannot create: treat as destroyed, never store plaintext
            raise KeyDestroyed(conversation_id)
        nonce = os.urandom(NONCE_BYTES)
        body = self._cipher(key).encrypt(nonce, plaintext.encode("utf-8"),
                                         associated_data(conversation_id, scope, field, self.purpose))
        return SEALED_PREFIX + pybase64.b64encode(nonce + body, URLSAFE).decode("ascii")

    def open(self, conversation_id: str, scope: str, field: str, sealed: str | None) -> Revealed | None:
        """The plaintext, ``None`` for an absent field, or a :class:`Withheld` marker. Never raises."""
        if sealed is None:
            return None
        if not is_sealed(sealed):
            return Unreadable(field)
        opening = self._opening(conversation_id, scope, field)
        if opening is None:
            return Shredded(field)
        cipher, ad = opening
        try:
            raw = memoryview(pybase64.b64decode(sealed[len(SEALED_PREFIX) :], URLSAFE, padded=False))
            plain = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], ad)
        except (InvalidTag, ValueError):
            return Unreadable(field)
        return plain.decode("utf-8")

    def _opening(self, conversation_id: str, scope: str, field: str) -> tuple[AESGCM, bytes] | None:
        """The cipher and the associated data a seal of ``field`` in ``scope`` opens with
        (``None``: no key), remembered by a sealer that keeps its ciphers."""
        remembered = (conversation_id, scope, field)
        if self._openings is not None and (opening := self._openings.get(remembered)) is not None:
            return opening
        key = self.keyring.key_for(conversation_id, create=False)
        if key is None:
            return None
        opening = (self._cipher(key), associated_data(conversation_id, scope, field, self.purpose))
        if self._openings is not None:
            self._openings[remembered] = opening
        return opening


    def prove(self, conversation_id: str, scope: str, context: bytes, subject: bytes) -> str:
        """A keyed MAC of ``subject`` under the conversation's key, bound to ``scope`` and to
        ``context`` (what is proven, and in which version): only a holder of the key can
        make one, and it is worthless once the key is destroyed. Raises :class:`KeyDestroyed`."""
        key = self.keyring.key_for(conversation_id, create=True)
        if key is None:
            raise KeyDestroyed(conversation_id)
        return self._proof(key, conversation_id, scope, context, subject)

    def proves(self, conversation_id: str, scope: str, context: bytes, subject: bytes, proof: object) -> bool:
        """Whether ``proof`` is :meth:`prove`'s MAC of ``subject``; ``False`` without the key. Never raises."""
        if not isinstance(proof, str):
            return False
        remembered = (conversation_id, scope, context)
        if self._proof_macs is None or (mac := self._proof_macs.get(remembered)) is None:
            key = self.keyring.key_for(conversation_id, create=False)
            if key is None:
                return False
            mac = self._prepared_mac(key, conversation_id, scope, context)
        return hmac.compare_digest(_mac_of(mac, subject), proof)

    def _proof(self, key: bytes, conversation_id: str, scope: str, context: bytes, subject: bytes) -> str:
        """Keyed BLAKE2b (a MAC by design, and cheaper than HMAC-SHA-256 over a block's JSON)
        under a key derived from the data key for ``context``, over the associated data, a
        zero byte and ``subject``."""
        return _mac_of(self._prepared_mac(key, conversation_id, scope, context), subject)

    def _prepared_mac(self, key: bytes, conversation_id: str, scope: str, context: bytes) -> Any:
        """The MAC's state before its subject (remembered by a sealer that keeps its ciphers)."""
        remembered = (conversation_id, scope, context)
        if self._proof_macs is not None and (mac := self._proof_macs.get(remembered)) is not None:
            return mac
        mac_key = hashlib.blake2b(b"imprint.proof/v1\x00" + context, key=key, digest_size=32).digest()
        mac = hashlib.blake2b(associated_data(conversation_id, scope, "proof", self.purpose) + b"\x00",
                              key=mac_key, digest_size=32)
        if self._proof_macs is not None:
            self._proof_macs[remembered] = mac
        return mac

    def fingerprint(self, conversation_id: str, scope: str, field: str, plaintext: str) -> str:
        """A keyed MAC of ``plaintext``: equal texts give equal fingerprints under one conversation key,
        and without the key (or after it is destroyed) the fingerprint reveals nothing. Raises
        :class:`KeyDestroyed`."""
        key = self.keyring.key_for(conversation_id, create=True)
        if key is None:
            raise KeyDestroyed(conversation_id)
        mac_key = hmac.new(key, b"imprint.fingerprint/v1", hashlib.sha256).digest()
        ad = associated_data(conversation_id, scope, field, self.purpose)
        return "fpv1." + hmac.new(mac_key, ad + b"\x00" + plaintext.encode("utf-8"), hashlib.sha256).hexdigest()


def _mac_of(prepared: Any, subject: bytes) -> str:
    """A proof: the prepared MAC (left as it is) over ``subject``, in URL-safe base64."""
    mac = prepared.copy()
    mac.update(subject)
    return pybase64.b64encode(mac.digest(), URLSAFE).decode("ascii")


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def key_name_for(run_id: str, conversation_id: str | None = None) -> str:
    """The keyring entry a Publication run's bodies are sealed under: its
    conversation's key, or ``run:<run_id>`` until the conversation is known."""
    return conversation_id if conversation_id else f"run:{run_id}"

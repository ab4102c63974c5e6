"""R4, R1: what a commit's proof covers — the committed block exactly as it is served.

A commit event holds its block as Publication settled it and is its own receipt. The
Publication log's mapper (``services.publication.sealing``) adds to each stored commit a
keyed MAC, under the run's conversation key, over the canonical JSON of
:func:`committed_form`: the block with its receipt, as ``answer.published`` carries it and
as an answer view serves it. A reader that holds the key and finds the MAC intact knows
the record is byte for byte what Publication committed, so it serves that form without
checking the record field by field (:func:`imprint.recovery.integrity.served`); any other
record — no proof (a log written before proofs), a proof that does not verify (a changed
record, a moved proof, a destroyed key) — is examined in full, with the same verdict as
ever. A proof never withholds anything: it only spares the examination of a record that
proves itself.

:data:`PROOF_CONTEXT` names the served form's schema: when :class:`CommittedBlock`
changes, the form a record is served in may change with it, so proofs made under the
old schema stop verifying and those records are examined in full (and served as the new
code serves them).

No keys and no I/O here: the MAC itself is :meth:`imprint.shredding.FieldSealer.prove`, and
:func:`commit_proof` is all the mapper asks of this module for each event it stores."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from imprint.canonical import canonical_bytes
from imprint.contracts.publication import CommittedBlock
from imprint.publication.run import PublicationRun
from imprint.shredding import FieldSealer

SERVED_SCHEMA = hashlib.sha256(canonical_bytes(CommittedBlock.model_json_schema(mode="serialization"))).hexdigest()[:16]
PROOF_CONTEXT = f"imprint.commit-proof/v1/{SERVED_SCHEMA}".encode()
"""What a proof's key is derived for: the proof's version and the served form's schema."""


def proof_subject(form: Mapping[str, Any]) -> bytes:
    """The canonical JSON of a served form, which a proof covers. A :class:`CommittedBlock`
    has no float field (``tests/unit/recovery/test_recovery_proof_form.py``), so its JSON
    is not searched for one."""
    return canonical_bytes(form, floats=False)


@dataclass(frozen=True, slots=True)
class Proven:
    """A commit whose proof verified: its served form and that form's canonical JSON."""

    form: dict[str, Any]
    canonical: bytes


def json_time(moment: datetime) -> str:
    """A time as pydantic's JSON writes it (``Z`` for UTC, where ``isoformat`` writes ``+00:00``).

    A time in UTC (every time of the log) is spelled from its second, formatted once for
    all the times of that second, and its microseconds: ``isoformat`` formats every field
    of every time anew, and a reader checking a log's proofs spells the time of every commit."""
    if moment.tzinfo is timezone.utc:
        second = _utc_second(moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second)
        micro = moment.microsecond
        return f"{second}.{micro:06d}Z" if micro else second + "Z"
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


@functools.lru_cache(maxsize=1024)
def _utc_second(year: int, month: int, day: int, hour: int, minute: int, second: int) -> str:
    """A UTC second as ``isoformat`` writes it, without its offset."""
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"


def iso_time(json_text: str) -> str:
    """A time :func:`json_time` wrote, as ``isoformat`` writes it (how the recovery fold keeps
    times): a proven commit's time is then read from its served form, not formatted again."""
    return json_text[:-1] + "+00:00" if json_text.endswith("Z") else json_text


def committed_form(block: Mapping[str, Any], receipt_id: str, log_position: int, committed_at: datetime
                   ) -> dict[str, Any]:
    """The committed block as served (a :class:`CommittedBlock`'s JSON), from a sound commit
    record: the stored block (a ``BlockView``'s JSON) with its receipt."""
    return {**block, "receipt": {"receipt_id": receipt_id, "log_position": log_position,
                                 "committed_at": json_time(committed_at)}}


def served_form(event: Any) -> dict[str, Any] | None:
    """The form a commit event's proof covers (``None``: an event that carries no proof),
    from the event at hand with its body in clear: the same function where the proof is
    made and where it is checked."""
    if not isinstance(event, PublicationRun.BlockRevisionCommitted):
        return None
    block = event.block
    if not isinstance(block, dict) or not isinstance(event.receipt_id, str):
        return None
    return committed_form(block, event.receipt_id, event.originator_version, event.timestamp)


def commit_proof(sealer: FieldSealer, key_name: str, scope: str, event: Any) -> str | None:
    """The MAC a commit event's stored record carries, over its served form with the body in
    clear, under ``key_name`` bound to ``scope`` (``None``: an event that carries no proof).
    The mapper asks it once for each event it seals: which events carry a proof, what the
    proof covers and the MAC are this module's and the sealer's to say. Raises
    :class:`~imprint.shredding.KeyDestroyed`."""
    form = served_form(event)
    return None if form is None else sealer.prove(key_name, scope, PROOF_CONTEXT, proof_subject(form))

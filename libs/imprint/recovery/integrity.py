"""R4: is a committed revision what its commit said it was?

A revision is served only if its record still proves itself:

``malformed_record``
    the stored block is not a BlockView any more (missing or unknown fields);
``corrupt_body``
    the displayed text does not hash to the recorded ``body_sha256``;
``proof_missing``
    the receipt does not bind this block revision: no receipt id, or not the id
    Publication issues for (block_id, revision), or the revision's candidate
    binding is gone;
``seal_unopenable``
    the body was sealed (X8) and its seal does not open although its key exists
    (damaged ciphertext, a seal moved from another record);
``shredded``
    the body's conversation was deleted (X8): its key is gone by design, so the body
    cannot be served — this withholds it but is not corruption.

A defect withholds that revision alone; every other block is still served. A revision
whose commit proof holds (a keyed MAC over its served form, checked by the reader) was
committed by Publication as it is and is served without these checks; any other revision
is examined in full.
A legacy record without a source hint is not a defect: it reads as
``unknown`` (P10), never as clean."""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Mapping

from pydantic import ValidationError

from imprint.contracts.publication import CommittedBlock
from imprint.publication.hints import HintBinding, read_hint
from imprint.publication.run import receipt_id_for
from imprint.recovery.run_ledger import Revision

DefectReason = Literal["malformed_record", "corrupt_body", "proof_missing", "seal_unopenable", "shredded"]


def body_sha256(markdown: str) -> str:
    return hashlib.sha256(markdown.encode("utf-8", "surrogatepass")).hexdigest()


def bound_block(revision: Revision) -> dict[str, Any]:
    """The stored block with its hint read through its binding (P10)."""
    block = dict(revision.block)
    binding = HintBinding.of(block)
    block["source_hint"] = read_hint(block, binding) if binding is not None else "unknown"
    return block


_validate_committed = CommittedBlock.__pydantic_validator__.validate_python
_dump_committed = CommittedBlock.__pydantic_serializer__.to_python
"""``CommittedBlock.model_validate`` and ``model_dump`` without their keyword handling: a
replay validates and dumps every live block of the log once each."""


def committed_view(revision: Revision) -> CommittedBlock | None:
    """The revision as a :class:`CommittedBlock`, or ``None`` if the record is malformed."""
    block = bound_block(revision)  # a copy already: the receipt joins it, not a second copy
    block["receipt"] = dict(revision.receipt)
    try:
        return _validate_committed(block)  # type: ignore[no-any-return]
    except (ValidationError, TypeError, ValueError):
        return None


def examine(revision: Revision) -> tuple[tuple[DefectReason, str] | None, CommittedBlock | None]:
    """The first defect of ``revision`` with an operator detail (ids and hashes, never
    body text), or ``None`` if the revision proves itself; and the revision as a
    :class:`CommittedBlock` when the checks got as far as building it (``None``
    otherwise). One validation serves both the verdict and the served block."""
    if revision.receipt_id is None:
        return ("proof_missing", "the commit record has no receipt id"), None
    if revision.seal == "shredded":
        return ("shredded", "the conversation was deleted; the body's key is destroyed"), None
    if revision.seal == "unopenable":
        return ("seal_unopenable", "the sealed body does not open under its conversation key"), None
    view = committed_view(revision)
    if view is None:
        return ("malformed_record", "the stored block is not a block revision any more"), None
    actual = body_sha256(view.content.markdown)
    if actual != view.body_sha256:
        return ("corrupt_body", f"body hashes to {actual[:16]}…, its record says {view.body_sha256[:16]}…"), view
    expected = receipt_id_for(view.block_id, view.revision)
    if revision.receipt_id != expected:
        return ("proof_missing", f"receipt {revision.receipt_id} is not the receipt of revision {view.revision}"), view
    if revision.candidate_id is None or revision.candidate_id != view.candidate_id:
        return ("proof_missing", "the revision's candidate binding does not match its commit"), view
    return None, view


def diagnose(revision: Revision) -> tuple[DefectReason, str] | None:
    """The first defect of ``revision`` with an operator detail (ids and hashes, never
    body text), or ``None`` if the revision proves itself."""
    return examine(revision)[0]


def defect_of(revision: Revision) -> DefectReason | None:
    found = diagnose(revision)
    return None if found is None else found[0]


def served(revision: Revision) -> tuple[DefectReason | None, dict[str, Any] | None]:
    """The revision's defect, or ``None`` and its JSON exactly as committed (see
    :func:`served_block`), from one examination — none for a revision whose proof the
    reader found intact (:mod:`imprint.publication.proof`): it is served as proven."""
    if revision.proven is not None:
        return None, dict(revision.proven.form)
    found, view = examine(revision)
    if found is not None:
        return found[0], None
    assert view is not None
    return None, _dump_committed(view, mode="json")


def served_block(revision: Revision) -> dict[str, Any] | None:
    """The JSON of a sound revision exactly as committed (as ``answer.published`` carries
    it): text, rendered numbers and citations of commit time (R6). ``None`` if defective."""
    return served(revision)[1]


def stored_block(revision: Revision) -> Mapping[str, Any]:
    """The record as stored, for audit, whatever its integrity."""
    return revision.block

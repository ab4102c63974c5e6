"""X3 — the question, its condition set (QCS) and the message binding.

Question normalization (:func:`normalize_question`), in this order:

1. Unicode NFKC (full-width letters and digits, compatibility forms → canonical);
2. zero-width characters (U+200B…U+200D, U+2060, U+FEFF) removed;
3. ``casefold()`` (locale-free lower-casing, ``ß`` → ``ss``);
4. every run of whitespace (any Unicode space, tab, newline) → one ASCII space;
5. leading and trailing whitespace stripped.

Punctuation is kept: it changes meaning ("why?" vs "why!") and stripping it
would merge different questions. The normalized question is stored next to the
exact question — both sealed (private) — and is never used to decide identity:
identity is the message binding (conversation_id, message_id) and the QCS id.

QCS identity rules (checked by :func:`check_qcs`, enforced through the
``QcsIdentity`` aggregate, one per qcs_id, which remembers the one execution and
conversation that own it):

* a qcs_id belongs to exactly one execution — reusing it for another run is refused;
* inheriting the previous turn's conditions means a *new* qcs_id whose
  ``inherits_from`` names the parent — ``inherits_from == qcs_id`` is refused;
* the parent must be known and must belong to the *same* conversation;
* a condition marked ``source: inherited`` needs a parent.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from eventsourcing.domain import Aggregate

from imprint.contracts.runtime import QuestionConditionSet
from imprint.ids import FoundByKey
from imprint.journal import ids
from imprint.journal.refusals import Refusal, RefusalCode

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_WHITESPACE = re.compile(r"\s+")


def normalize_question(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _ZERO_WIDTH.sub("", text)
    text = text.casefold()
    return _WHITESPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class QcsBinding:
    """What the journal knows about an existing QCS identity."""

    qcs_id: str
    run_id: str
    conversation_id: str


def check_qcs(
    qcs: QuestionConditionSet,
    *,
    run_id: str,
    conversation_id: str,
    existing: QcsBinding | None,
    parent: QcsBinding | None,
) -> None:
    """Raise :class:`Refusal` unless ``qcs`` may become this run's condition set."""
    if existing is not None and existing.run_id != run_id:
        raise Refusal(RefusalCode.QCS_REUSED, f"qcs {qcs.qcs_id} belongs to run {existing.run_id}")
    if qcs.inherits_from is not None:
        if qcs.inherits_from == qcs.qcs_id:
            raise Refusal(RefusalCode.QCS_SELF_INHERITANCE, f"qcs {qcs.qcs_id} inherits from itself")
        if parent is None:
            raise Refusal(RefusalCode.QCS_PARENT_UNKNOWN, f"parent qcs {qcs.inherits_from} unknown")
        if parent.conversation_id != conversation_id:
            raise Refusal(RefusalCode.QCS_CROSS_CONVERSATION, f"parent qcs {qcs.inherits_from} is of another conversation")
    elif any(c.source == "inherited" for c in qcs.conditions):
        raise Refusal(RefusalCode.QCS_INHERITED_WITHOUT_PARENT, f"qcs {qcs.qcs_id} has inherited conditions and no parent")


def conditions_json(qcs: QuestionConditionSet) -> str:
    """The private part of a QCS (condition names, values and their sources), as one sealed field."""
    return json.dumps([c.model_dump() for c in qcs.conditions], ensure_ascii=False, separators=(",", ":"))


def condition_sources(qcs: QuestionConditionSet) -> dict[str, int]:
    """Non-private summary: how many conditions came from each source."""
    counts: dict[str, int] = {}
    for c in qcs.conditions:
        counts[c.source] = counts.get(c.source, 0) + 1
    return counts


def parse_conditions(revealed: str) -> list[dict[str, Any]]:
    return list(json.loads(revealed))


class QcsIdentity(FoundByKey, Aggregate, key=ids.qcs_id, by=("qcs_id",)):
    """One QCS id, owned by one execution of one conversation, forever."""

    class_version = 1

    class Registered(Aggregate.Created):
        class_version = 1
        qcs_id: str
        run_id: str
        conversation_id: str
        inherits_from: str | None

    def __init__(self, qcs_id: str, run_id: str, conversation_id: str, inherits_from: str | None) -> None:
        self.qcs_id = qcs_id
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.inherits_from = inherits_from

    @classmethod
    def register(cls, qcs: QuestionConditionSet, run_id: str, conversation_id: str) -> QcsIdentity:
        return cls(qcs.qcs_id, run_id, conversation_id, qcs.inherits_from)

    def binding(self) -> QcsBinding:
        return QcsBinding(self.qcs_id, self.run_id, self.conversation_id)

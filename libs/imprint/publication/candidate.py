"""P1–P3: what may become a candidate, and under which identity.

Two entries feed Publication. Entry A is plain assistant text the gateway
normalized (``answer.text``); entry B is the ``send_answer_part`` tool
(``answer.part``). Both become a :class:`Candidate` whose id is derived from its
origin — ``text:<turn_id>:<segment>`` or ``tool:<tool_call_id>`` — so the same
message delivered twice is the same candidate.

Intake refuses only what is not a candidate (P2, P3): frames that are never
answers, a tool call without identity, unsealed or unparseable arguments, an
envelope over the transport cap. Everything a sealed, parseable call carries is
kept *raw* in :class:`ProposedBlock`: an invalid ``replaces``, control
characters, an oversized body or bad display metadata are for Publication to
settle per block, not for the entry to veto."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from imprint.contracts.runtime import AnswerPart, AnswerText
from imprint.publication.policy import DEFAULT_POLICY, Policy

Entry = Literal["text", "tool"]

RefusalReason = Literal[
    "not_an_answer",
    "missing_tool_identity",
    "invalid_tool_identity",
    "unsealed_arguments",
    "unparseable_arguments",
    "oversized_envelope",
    "conversation_deleted",
    "run_not_admitted",
    "run_lost",
]

MAX_CANDIDATE_ID_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class IntakeRefusal:
    """A message that never becomes a candidate, with its recorded reason (P2)."""

    reason: RefusalReason
    detail: str
    message_type: str
    run_id: str | None = None
    candidate_id: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class ProposedBlock:
    """One block as the model proposed it. Fields stay as given (any JSON value);
    :mod:`extraction` and :mod:`revisions` decide what they are worth."""

    index: int
    markdown: Any = None
    table: Any = None
    replaces: Any = None
    role: Any = None
    depends_on: Any = None
    display: Any = None
    malformed: str | None = None
    """Set when the block is not even an object; it is rejected ``malformed_block``."""

    @property
    def wants_modification(self) -> bool:
        """P12: any non-empty ``replaces`` is an attempt to modify, valid or not."""
        if self.replaces is None:
            return False
        if isinstance(self.replaces, str):
            return self.replaces.strip() != ""
        return True


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """A proposal Publication will settle, one block at a time (P6)."""

    run_id: str
    candidate_id: str
    entry: Entry
    turn_id: str
    blocks: tuple[ProposedBlock, ...]
    tool_call_id: str | None = None


def candidate_id_for(entry: Entry, *parts: object) -> str:
    """P1: ``tool:<tool_call_id>`` / ``text:<turn_id>:<segment>``. An id longer
    than a wire identifier is replaced by a digest of itself (still stable)."""
    natural = ":".join([entry, *map(str, parts)])
    if len(natural) <= MAX_CANDIDATE_ID_CHARS:
        return natural
    return f"{entry}:~{hashlib.sha256(natural.encode('utf-8', 'surrogatepass')).hexdigest()}"


def intake(message: object, envelope_size: int = 0, policy: Policy = DEFAULT_POLICY) -> Candidate | IntakeRefusal:
    """Turn a runtime message into a :class:`Candidate`, or say why it is not one.

    ``envelope_size`` is the size in bytes of the raw Kafka value the message
    was decoded from (P3: over the transport cap → ``oversized_envelope``)."""
    message_type = str(getattr(message, "type", type(message).__name__))
    run_id = getattr(message, "run_id", None)
    if not isinstance(message, (AnswerText, AnswerPart)):
        return IntakeRefusal("not_an_answer", f"{message_type} is never an answer", message_type, run_id)
    if envelope_size > policy.transport_cap_bytes:
        return IntakeRefusal(
            "oversized_envelope",
            f"envelope of {envelope_size} bytes exceeds {policy.transport_cap_bytes}",
            message_type,
            run_id,
        )
    if isinstance(message, AnswerText):
        return Candidate(
            run_id=message.run_id,
            candidate_id=candidate_id_for("text", message.turn_id, message.segment),
            entry="text",
            turn_id=message.turn_id,
            blocks=(ProposedBlock(0, markdown=message.text),),
        )
    return _intake_part(message)


def _intake_part(part: AnswerPart) -> Candidate | IntakeRefusal:
    tool_call_id = part.tool_call_id
    if tool_call_id is None or tool_call_id.strip() == "":
        return IntakeRefusal("missing_tool_identity", "answer.part without tool_call_id", part.type, part.run_id)
    if _CONTROL.search(tool_call_id):
        return IntakeRefusal(
            "invalid_tool_identity", "tool_call_id contains control characters", part.type, part.run_id
        )
    candidate_id = candidate_id_for("tool", tool_call_id)
    if not part.sealed:
        return IntakeRefusal(
            "unsealed_arguments", "tool call arguments are not closed", part.type, part.run_id, candidate_id
        )
    arguments = part.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as error:
            return IntakeRefusal(
                "unparseable_arguments", f"arguments are not JSON: {type(error).__name__}",
                part.type, part.run_id, candidate_id,
            )
    if not isinstance(arguments, dict):
        return IntakeRefusal(
            "unparseable_arguments", f"arguments are a JSON {type(arguments).__name__}, not an object",
            part.type, part.run_id, candidate_id,
        )
    return Candidate(
        run_id=part.run_id,
        candidate_id=candidate_id,
        entry="tool",
        turn_id=part.turn_id,
        tool_call_id=tool_call_id,
        blocks=proposed_blocks(arguments),
    )


_BLOCK_FIELDS = ("markdown", "table", "replaces", "role", "depends_on", "display")


def _proposed(index: int, fields: dict[str, Any]) -> ProposedBlock:
    return ProposedBlock(index, **{name: fields.get(name) for name in _BLOCK_FIELDS})


def proposed_blocks(arguments: dict[str, Any]) -> tuple[ProposedBlock, ...]:
    """P6: the blocks of one ``send_answer_part`` call.

    ``blocks`` lists several; otherwise the inline ``markdown``/``table`` is the
    single block. When both are given, the inline block comes first so neither
    body is swallowed. A call with nothing in it still yields one (empty) block,
    which settles as ``empty_body`` (P4) rather than vanishing."""
    drafts: list[ProposedBlock] = []
    inline = arguments.get("markdown") is not None or arguments.get("table") is not None
    blocks = arguments.get("blocks")
    if inline or blocks is None or blocks == []:
        drafts.append(_proposed(0, arguments))
    if blocks is not None and not isinstance(blocks, list):
        drafts.append(ProposedBlock(len(drafts), malformed=f"blocks is a {type(blocks).__name__}, not a list"))
    elif isinstance(blocks, list):
        for item in blocks:
            index = len(drafts)
            if isinstance(item, dict):
                drafts.append(_proposed(index, item))
            else:
                drafts.append(ProposedBlock(index, malformed=f"block is a {type(item).__name__}, not an object"))
    return tuple(drafts)

"""``imprint.runtime.v1``: what the research runtime reports (runtime → publication, journal)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from imprint.contracts.base import ConversationRunMessage, Identifier, Model, RunMessage
from imprint.contracts.conversation import ConversationPolicy

Scope = Literal["public", "private"]
Outcome = Literal["answered", "insufficient_evidence", "generation_unavailable", "declined"]


class Condition(Model):
    """One condition of a question condition set, with where it came from."""

    name: str
    value: str
    source: Literal["user", "inherited", "default"] = "user"


class QuestionConditionSet(Model):
    """The QCS of X3. ``inherits_from`` names the previous turn's QCS when its
    conditions were carried over; the inheriting set always has its own ``qcs_id``."""

    qcs_id: Identifier
    conditions: list[Condition] = []
    inherits_from: Identifier | None = None


class RunAdmitted(ConversationRunMessage):
    type: Literal["run.admitted"] = "run.admitted"
    message_id: Identifier
    question: str
    qcs: QuestionConditionSet
    policy: ConversationPolicy | None = None
    """X12: what this question does while another of its conversation is live or queued
    (:mod:`imprint.contracts.conversation`); none: the deployment default
    (``IMPRINT_CONVERSATION_POLICY``, ``enqueue`` unless set)."""


class RunQueued(RunMessage):
    type: Literal["run.queued"] = "run.queued"


class RunStarted(RunMessage):
    type: Literal["run.started"] = "run.started"


class RunStage(RunMessage):
    type: Literal["run.stage"] = "run.stage"
    stage: Identifier
    detail: str = ""


class RunHeartbeat(RunMessage):
    """X10: the runtime is alive and working on this run (a model or tool call is in
    flight). It renews the run's lease like any other runtime message and is no fact of
    the run: the Journal records nothing for it while the run is open, and refuses
    (and records) one that comes after the run was closed."""

    type: Literal["run.heartbeat"] = "run.heartbeat"
    in_flight: Literal["model", "tool"] | None = None


class EvidenceGranted(RunMessage):
    """This run may cite ``source_id`` (P7)."""

    type: Literal["evidence.granted"] = "evidence.granted"
    source_id: Identifier
    scope: Scope
    owner_account_id: Identifier
    title: str = ""


class NumericIssued(RunMessage):
    """A Host-issued numeric value the model may render through ``[[num:handle]]`` (P9)."""

    type: Literal["numeric.issued"] = "numeric.issued"
    handle_id: Identifier
    value: Decimal
    unit: str = ""
    version: int = Field(ge=1)
    source_id: Identifier | None = None


class AnswerText(RunMessage):
    """Entry A: plain assistant text normalized by the gateway."""

    type: Literal["answer.text"] = "answer.text"
    turn_id: Identifier
    segment: int = Field(ge=0)
    text: str


class TableContent(Model):
    columns: list[str]
    rows: list[list[str]]


class BlockDraft(Model):
    """One block a ``send_answer_part`` call proposes. Either ``markdown`` or ``table``. A call's
    arguments give one inline (these fields at their top level) or several as ``blocks``."""

    markdown: str | None = None
    table: TableContent | None = None
    replaces: str | None = None
    role: str | None = None
    depends_on: list[str] = []
    display: dict[str, Any] | None = None


class AnswerPart(RunMessage):
    """Entry B: a ``send_answer_part`` tool call. ``arguments`` arrive as the model's
    JSON text or as an already-decoded object; ``sealed`` says the call is closed."""

    type: Literal["answer.part"] = "answer.part"
    turn_id: Identifier
    tool_call_id: str | None = None
    sealed: bool
    arguments: dict[str, Any] | str


class ToolReceipt(RunMessage):
    type: Literal["tool.receipt"] = "tool.receipt"
    tool_call_id: Identifier
    status: Literal["ok", "failed", "unknown"]


class EvidenceItem(Model):
    source_id: Identifier
    title: str = ""
    excerpt: str = ""


class EvidenceSet(Model):
    items: list[EvidenceItem] = []
    snapshot_id: Identifier | None = None
    knowledge_version: str | None = None


class RunCompleted(RunMessage):
    type: Literal["run.completed"] = "run.completed"
    outcome: Outcome
    answer_text: str | None = None
    evidence: EvidenceSet = EvidenceSet()


class RunStopped(RunMessage):
    type: Literal["run.stopped"] = "run.stopped"
    cancel_request_id: uuid.UUID | None = None
    """X11: the ``event_id`` of the user's ``run.cancel_requested`` this stop answers (none: the
    runtime stopped on its own). The request and this stop travel on different topics, so the
    Journal may read this first: it then records the request from here (once, by its id)."""


class RunFailed(RunMessage):
    type: Literal["run.failed"] = "run.failed"
    reason: str


class RunThrottled(RunMessage):
    type: Literal["run.throttled"] = "run.throttled"


class RunRejected(RunMessage):
    type: Literal["run.rejected"] = "run.rejected"
    reason: str = ""


class ModelFrame(RunMessage):
    """A raw protocol frame from the model provider. Never an answer (P2)."""

    type: Literal["model.frame"] = "model.frame"
    payload: Any = None


class ModelReasoning(RunMessage):
    """Hidden reasoning. Never an answer (P2)."""

    type: Literal["model.reasoning"] = "model.reasoning"
    text: str = ""


class RouterResult(RunMessage):
    """A routing decision. Never an answer (P2)."""

    type: Literal["router.result"] = "router.result"
    route: str = ""
    payload: Any = None


RuntimeMessage = Annotated[
    Union[
        RunAdmitted,
        RunQueued,
        RunStarted,
        RunStage,
        RunHeartbeat,
        EvidenceGranted,
        NumericIssued,
        AnswerText,
        AnswerPart,
        ToolReceipt,
        RunCompleted,
        RunStopped,
        RunFailed,
        RunThrottled,
        RunRejected,
        ModelFrame,
        ModelReasoning,
        RouterResult,
    ],
    Field(discriminator="type"),
]
runtime_messages: TypeAdapter[RuntimeMessage] = TypeAdapter(RuntimeMessage)

LIFECYCLE_MESSAGES = (RunAdmitted, RunQueued, RunStarted, RunCompleted, RunStopped, RunFailed, RunThrottled, RunRejected)
"""The messages that move a run through its lifecycle (X2): the Journal's table gives each one
its lease row (X10)."""
LIFECYCLE_TYPES = frozenset(message_class.model_fields["type"].default for message_class in LIFECYCLE_MESSAGES)
NON_ANSWER_TYPES = frozenset({"model.frame", "model.reasoning", "router.result"})

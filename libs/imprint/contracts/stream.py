"""The client protocol on the wire: what Delivery's streams send a client (docs/protocol.md).

* :data:`SSE_FRAME` — one event of a run's stream (``GET /v1/runs/{id}/events``) or of a
  conversation's notices (``GET /v1/conversations/{id}/notices``), as ``{id, event, data}``,
  discriminated by ``event``: every frame kind of D2, the ``reset`` of D8 and the ``notice`` of D7;
* :data:`UI_PART` — one part of the AI SDK UI message stream (``data: <part>``), by ``type``.

Each block frame's ``data`` is either the whole frame or, once a newer frame of the same
block superseded it (or a withdrawal after the end or a deletion hid it), its
:class:`Skeleton`: the frame keeps its id and body hash, so D3's digest still checks.

**Versioning (R8 for clients).** These models describe v1 as a *reader* should: every object
allows fields it does not name (``extra="allow"``) — a server of a later v1 may add fields,
and a client ignores what it does not know. A new frame kind, part type or notice kind is
also an addition a client ignores. What v1 promises never changes: a field named here keeps
its name, type and meaning; removing or retyping one is v2 (a new path)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from imprint.contracts import publication
from imprint.contracts.publication import SourceHint


class Wire(BaseModel):
    """A reader's view of a v1 object: fields it does not know are kept and ignored."""

    model_config = ConfigDict(extra="allow", frozen=True)


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


# Publication's own models of a block's parts, read as a v1 client reads them (extra fields allowed).
class Content(publication.Content):
    model_config = ConfigDict(extra="allow", frozen=True)


class Citation(publication.Citation):
    model_config = ConfigDict(extra="allow", frozen=True)


class RenderedNumber(publication.RenderedNumber):
    model_config = ConfigDict(extra="allow", frozen=True)


class Receipt(publication.Receipt):
    """Proof that the revision shown was durably committed (P15): its log position."""

    model_config = ConfigDict(extra="allow", frozen=True)


class DisplayEntry(Wire):
    """The one entry a viewer shows for a block now (P16): ``blocks[block_id] = block``."""

    block_id: str
    revision: int = Field(ge=1)
    delivery_ordinal: int = Field(ge=0)
    candidate_id: str | None
    content: Content | None
    role: str
    citations: list[Citation]
    numbers: list[RenderedNumber]
    depends_on: list[str]
    source_hint: SourceHint
    hints: list[str]
    truncated: bool
    body_sha256: Sha256 | None
    status: Literal["saved", "unsaved", "save_unknown", "conflict"]
    saved: bool
    receipt: Receipt | None
    conflict: dict[str, Any] | None


class Skeleton(Wire):
    """What remains of a block frame a newer frame of its block superseded, a withdrawal after
    the end hid or a deletion purged: its identity and hash, no body."""

    model_config = ConfigDict(extra="allow", frozen=True, json_schema_extra={
        "anyOf": [{"required": [marker]} for marker in ("superseded", "withdrawn", "purged")]})
    block_id: str | None = None
    revision: int | None = None
    seq: int | None = None
    superseded: Literal[True] | None = None
    withdrawn: Literal[True] | None = None
    purged: Literal[True] | None = None
    body_sha256: Sha256

    @model_validator(mode="after")
    def _marked(self) -> Skeleton:
        if not (self.superseded or self.withdrawn or self.purged):
            raise ValueError("a skeleton says why its body is gone: superseded, withdrawn or purged")
        return self


class Progress(Wire):
    stage: str
    detail: str
    body_sha256: Sha256


class RunStatus(Wire):
    state: str | None
    previous: str | None
    sequence: int = Field(ge=0)
    outcome: str | None
    closed: bool
    reason: str | None
    body_sha256: Sha256


class BlockFrame(Wire):
    """A block's frame: its resulting display entry (``null``: no longer shown)."""

    block_id: str
    block: DisplayEntry | None
    body_sha256: Sha256


class Preview(BlockFrame):
    """``answer-preview``: a body not saved yet (P14), a save whose outcome is unknown or
    failed, or (X11) a preview a stopped run drops."""

    revision: int | None = None
    status: Literal["unsaved", "save_unknown", "save_failed", "dropped"]
    candidate_id: str | None = None
    reason: str | None = None


class Publication(BlockFrame):
    """``answer-publication``: a committed revision (``saved``) or an exact duplicate of one (P11)."""

    revision: int = Field(ge=1)
    status: Literal["saved", "unchanged"]


class Withdrawn(BlockFrame):
    """``answer-withdrawn``: the revision is no longer shown (P21); the cause never names the source (D6)."""

    revision: int = Field(ge=1)
    cause: str


class Rejected(Wire):
    """``answer-rejected``: a proposal refused, with a reason safe to show (D6)."""

    candidate_id: str
    block_index: int | None
    reason: str
    rejection: str
    block_id: str | None = None
    block: DisplayEntry | None = None
    body_sha256: Sha256


class ContentChunk(Wire):
    """``content``: the closed answer's text, in order, chunks of at most 28 characters."""

    seq: int = Field(ge=0)
    text: str = Field(max_length=28)
    body_sha256: Sha256


class EvidenceItem(Wire):
    source_id: str
    title: str
    redacted: bool


class Evidence(Wire):
    items: list[EvidenceItem]
    snapshot_id: str | None
    knowledge_version: str | None
    body_sha256: Sha256


class ConflictSide(Wire):
    kind: Literal["preview", "published"]
    body_sha256: str


class ProtocolConflict(Wire):
    """``error``: two bodies claimed one (block, revision) (P17)."""

    code: Literal["protocol_conflict"]
    block_id: str
    revision: int
    first: ConflictSide
    second: ConflictSide
    body_sha256: Sha256


class StreamSummary(Wire):
    """``stream-summary``: what D3's check compares the frames a client holds against."""

    last_id: int = Field(ge=0)
    frame_count: int = Field(ge=0)
    digest: str


class ResetData(Wire):
    """``reset`` (D8): forget every frame held; the whole view follows from id 1."""

    reason: str
    last_event_id: int = Field(ge=0)
    last_id: int = Field(ge=0)


class NoticeData(Wire):
    """``notice`` (D7): a block of an ended run is withdrawn; mark it in place."""

    notice_id: int = Field(ge=1)
    kind: str
    run_id: str
    block_id: str
    revision: int = Field(ge=0)
    cause: str
    at: str


class TurnData(Wire):
    """``turn`` (D9, on a conversation's stream): one of its questions changed its place; the
    queue after it is ``running`` and ``queued``. Ids, states and fixed words only (D6)."""

    entry_id: int = Field(ge=1)
    run_id: str
    kind: str
    """``transition`` (the run's lifecycle ``state``), or the Journal's fact (X12): ``queued``,
    ``started``, ``refused``, ``cancelled``, ``sent_now``, ``merged``, ``steered``, ``interrupted``,
    ``ended`` — a client shows a kind it does not know as the question's latest news."""
    state: str | None = None
    message_id: str | None = None
    policy: str | None = None
    reason: str | None = None
    by: str | None = None
    end: str | None = None
    sequence: int = Field(ge=0)
    running: list[str] | None = None
    queued: list[str] | None = None
    at: str


class ConversationNoticeData(NoticeData):
    """``notice`` on a conversation's stream (D9): a copy of the D7 notice, numbered as an entry
    of that stream."""

    entry_id: int = Field(ge=1)


FrameId = Annotated[int, Field(ge=1)]


def _frame(kind: str, data: Any, name: str, doc: str, *, id_type: Any = FrameId) -> type[BaseModel]:
    return type(name, (BaseModel,), {
        "__doc__": doc, "__module__": __name__,
        "__annotations__": {"id": id_type, "event": Literal[kind], "data": data},  # type: ignore[valid-type]
        "model_config": ConfigDict(extra="forbid", frozen=True, title=name),
    })


FRAMES: dict[str, type[BaseModel]] = {
    "progress": _frame("progress", Progress | Skeleton, "ProgressFrame", "where the run stands (newest wins)"),
    "run-status": _frame("run-status", RunStatus | Skeleton, "RunStatusFrame", "the run's lifecycle state"),
    "answer-preview": _frame("answer-preview", Preview | Skeleton, "PreviewFrame", Preview.__doc__ or ""),
    "answer-publication": _frame("answer-publication", Publication | Skeleton, "PublicationFrame",
                                 Publication.__doc__ or ""),
    "answer-withdrawn": _frame("answer-withdrawn", Withdrawn | Skeleton, "WithdrawnFrame", Withdrawn.__doc__ or ""),
    "answer-rejected": _frame("answer-rejected", Rejected | Skeleton, "RejectedFrame", Rejected.__doc__ or ""),
    "content": _frame("content", ContentChunk | Skeleton, "ContentFrame", ContentChunk.__doc__ or ""),
    "evidence-summary": _frame("evidence-summary", Evidence | Skeleton, "EvidenceFrame", "the closed answer's evidence"),
    "error": _frame("error", ProtocolConflict | Skeleton, "ErrorFrame", ProtocolConflict.__doc__ or ""),
    "stream-summary": _frame("stream-summary", StreamSummary, "StreamSummaryFrame", StreamSummary.__doc__ or ""),
    "done": _frame("done", Literal["[DONE]"], "DoneFrame", "the last frame, once: data exactly [DONE] (D2/D3)"),
    "reset": _frame("reset", ResetData, "ResetFrame", ResetData.__doc__ or "", id_type=Literal[0]),
    "notice": _frame("notice", NoticeData | ConversationNoticeData, "NoticeFrame", NoticeData.__doc__ or ""),
    "turn": _frame("turn", TurnData, "TurnFrame", TurnData.__doc__ or ""),
}
"""Every SSE event kind → its model: the run's frames (D2), ``reset`` (D8), ``notice`` (D7) and a
conversation stream's ``turn`` (D9)."""
RUN_FRAME_KINDS = tuple(kind for kind in FRAMES if kind not in ("reset", "notice", "turn"))

SSEFrame = Annotated[Union[tuple(FRAMES.values())], Field(discriminator="event")]  # type: ignore[valid-type]
SSE_FRAME: TypeAdapter[Any] = TypeAdapter(SSEFrame)


# The AI SDK UI message stream (npm ``ai`` 5.x–7.x): the parts imprint sends.

class UIBase(Wire):
    type: str


class StartPart(UIBase):
    type: Literal["start"]
    messageId: str
    messageMetadata: dict[str, Any] | None = None


class DataPart(UIBase):
    """``data-block``, ``data-evidence``, ``data-conflict``, ``data-rejection`` (kept, replaced in
    place by ``id``), ``data-progress`` and ``data-reset`` (transient); on a conversation's stream
    (D9) ``data-turn`` (one per question, replaced in place by ``id``: its run) and ``data-notice``."""

    type: Literal["data-block", "data-evidence", "data-conflict", "data-rejection", "data-progress", "data-reset",
                  "data-turn", "data-notice"]
    id: str | None = None
    data: dict[str, Any]
    transient: bool | None = None


class TextPart(UIBase):
    type: Literal["text-start", "text-end"]
    id: str


class TextDelta(UIBase):
    type: Literal["text-delta"]
    id: str
    delta: str


class SourceDocument(UIBase):
    type: Literal["source-document"]
    sourceId: str
    mediaType: str
    title: str


class MetadataPart(UIBase):
    type: Literal["message-metadata"]
    messageMetadata: dict[str, Any]


class FinishPart(UIBase):
    type: Literal["finish"]
    messageMetadata: dict[str, Any] | None = None


UI_PARTS: tuple[type[UIBase], ...] = (StartPart, DataPart, TextPart, TextDelta, SourceDocument, MetadataPart,
                                      FinishPart)
UIPart = Annotated[Union[UI_PARTS], Field(discriminator="type")]  # type: ignore[valid-type]
UI_PART: TypeAdapter[Any] = TypeAdapter(UIPart)

"""One run's frames as an AI SDK UI message stream (the ``ai`` npm package's
protocol, 5.x, 6.x and 7.x lines), so ``readUIMessageStream`` / ``useChat`` with
``DefaultChatTransport`` read a run unmodified.

The wire: SSE events of ``data: <JSON part>``, then ``data: [DONE]``; the response
carries ``x-vercel-ai-ui-message-stream: v1``. One run is one assistant message:

* ``start`` with a stable ``messageId`` (:func:`message_id`: the same for every
  replay of the run, before and after it ends) and the run's identity as metadata;
* every block as a ``data-block`` part whose ``id`` is the ``block_id``. The SDK
  keeps one part per (type, id) and replaces its ``data`` in place, so a revision
  replaces its block (P18) and a withdrawal is the same id with
  ``state: "withdrawn"`` (the protocol has no delete; P21); a preview a stopped run
  never committed, ``state: "dropped"`` (X11). Preview versus committed
  (``state``), ``revision``, ``ordinal``, ``source_hint``, ``citations`` — all inside
  ``data``: 5.x/6.x clients validate every part strictly (no extra top-level keys);
* a block whose first frame was superseded before this reader came holds its place
  with ``state: "superseded"`` until its newest frame replaces it, so parts keep the
  order in which blocks first appeared;
* the closed answer (``content`` frames, D5: only once the closed record exists) as
  ``text-start`` / ``text-delta`` / ``text-end``; the evidence as ``source-document``
  parts and one ``data-evidence`` part;
* ``run-status`` as ``message-metadata``; ``progress`` as a transient
  ``data-progress`` (never kept in the message); a protocol conflict (P17) as a
  ``data-conflict`` part; a refused new block as ``data-rejection``;
* ``done`` as ``finish`` (its metadata carries the run's state, outcome and the D3
  stream summary), then the stream ends. ``finishReason`` is never sent: 5.0's
  strict ``finish`` schema has no such key.

**A reset (D8).** The SDK's protocol has no positions: its chunks carry no ids, its
transport sends no ``Last-Event-ID`` and its reader builds the message from ``start``
(``readUIMessageStream``; ``useChat`` after a reload). So this stream never continues
after a position: every request gets ``start`` and the whole current view, which is
what a reset gives, and the reader ends with the same message as any new reader. The
protocol has no chunk that clears what a reader built either (a ``data-`` part is
replaced by id, text and sources are appended). So a request that does carry a
``Last-Event-ID`` the run cannot continue from (a client that kept an SSE position) is
answered like any other, with the ``reset`` frame as a *transient* ``data-reset`` part
right after ``start``: never kept in the message, handed to ``useChat``'s ``onData``,
so an application holding an older copy of this message knows to drop it rather than
merge the replay into it. A valid id changes nothing: the message is replayed from
``start`` as ever.

**Notices after the end (D7).** A block withdrawn after its run's ``done`` reaches a
client on its conversation's notices stream, not the run's (nothing follows ``done``).
Its AI SDK form (``GET /v1/ai-sdk/conversations/{id}/notices``, :func:`notice_part`) is
the part the run's own stream would have sent: ``data-block`` with the block's id and
``state: "withdrawn"``, plus the ``message_id`` of the run's message and the notice's
id. The SDK replaces a data part of the same type and id in place, so a front end hands
the notices of one message to ``readUIMessageStream({message, stream})`` (or applies
them to ``useChat``'s messages with ``setMessages``) and the block reads withdrawn where
it was. No ``start``: a notices stream belongs to no message of its own.

**The conversation stream (D9).** ``GET /v1/ai-sdk/conversations/{id}/events`` is the
conversation as one message of its own (:func:`conversation_message_id`): ``start``, then
each question as a ``data-turn`` part whose ``id`` is its run id (the SDK replaces it in
place as the question moves: waiting, running, ended, cancelled…) and each notice as a
``data-notice`` part (:func:`conversation_part`), each with its SSE ``id`` (the entry's)
for a client that resumes. The parts' order is the order the questions were first heard of.

Everything in a part is what the SSE frame already carries (client-safe, D6)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from imprint.delivery.frames import (
    CONTENT,
    DONE,
    ERROR,
    EVIDENCE,
    PREVIEW,
    PROGRESS,
    PUBLICATION,
    REJECTED,
    RESET,
    RUN_STATUS,
    SUMMARY,
    WITHDRAWN,
    Frame,
)

HEADER = ("x-vercel-ai-ui-message-stream", "v1")
DONE_EVENT = b"data: [DONE]\n\n"
BLOCK_EVENTS = frozenset({PREVIEW, PUBLICATION, WITHDRAWN, REJECTED})
_STRIPPED = ("superseded", "withdrawn", "purged")

Part = dict[str, Any]


def message_id(run_id: str) -> str:
    """The assistant message's id for a run: stable across replays and resumes."""
    return f"imprint-run-{run_id}"


def notice_part(notice: dict[str, Any]) -> Part:
    """A notice (:meth:`imprint.delivery.notices.Notice.payload`) as the ``data-block`` part
    that marks its block withdrawn in the run's message."""
    block_id, run_id = str(notice["block_id"]), str(notice["run_id"])
    return {"type": "data-block", "id": block_id, "data": {
        "block_id": block_id, "state": "withdrawn", "revision": notice.get("revision"), "cause": notice.get("cause"),
        "run_id": run_id, "message_id": message_id(run_id), "notice_id": notice.get("notice_id")}}


def conversation_message_id(conversation_id: str) -> str:
    """The id of a conversation's own message (D9): its questions and their queue."""
    return f"imprint-conversation-{conversation_id}"


def conversation_part(event: str, data: dict[str, Any]) -> Part:
    """An entry of a conversation stream (D9) as a data part: a ``turn`` replaces its
    question's part (``id``: the run), a ``notice`` is a part of its own."""
    if event == "turn":
        return {"type": "data-turn", "id": str(data["run_id"]), "data": data}
    return {"type": "data-notice", "id": f"{data.get('run_id')}:{data.get('block_id')}", "data": data}


def reset_part(data: dict[str, Any]) -> Part:
    """D8's reset as a transient part (never kept in a message)."""
    return {"type": "data-reset", "data": {k: data.get(k) for k in ("reason", "last_event_id", "last_id")},
            "transient": True}


def encode(part: Part) -> bytes:
    """One part as one SSE event (what the SDK's ``JsonToSseTransformStream`` writes)."""
    return b"data: " + json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def encode_all(parts: list[Part]) -> bytes:
    """Parts as the SSE events one write of a response carries."""
    return b"".join(encode(part) for part in parts)


def notice_event(frame: Frame) -> bytes:
    """A frame of a conversation's notices feed in its AI SDK form (D7): its SSE ``id`` (the
    SDK's parser ignores it; a client that resumes sends it back), then its part — the
    notice's :func:`notice_part`, or D8's :func:`reset_part`."""
    data = frame.data if isinstance(frame.data, dict) else {}
    part = reset_part(data) if frame.event == RESET else notice_part(data)
    return f"id: {frame.id}\n".encode() + encode(part)


def conversation_opening(conversation_id: str) -> bytes:
    """A conversation stream's AI SDK form opens its own message (D9)."""
    return encode({"type": "start", "messageId": conversation_message_id(conversation_id)})


def conversation_event(frame: Frame) -> bytes:
    """An entry of a conversation stream in its AI SDK form (D9): its SSE ``id``, then its
    :func:`conversation_part`, or D8's :func:`reset_part`."""
    data = frame.data if isinstance(frame.data, dict) else {}
    part = reset_part(data) if frame.event == RESET else conversation_part(frame.event, data)
    return f"id: {frame.id}\n".encode() + encode(part)


def block_data(block_id: str, entry: dict[str, Any] | None, frame: dict[str, Any]) -> dict[str, Any]:
    """``data`` of a ``data-block`` part: the block's display entry, or its withdrawal."""
    if entry is None and frame.get("status") == "dropped":  # X11: a preview never committed, dropped as such
        return {"block_id": block_id, "state": "dropped", "revision": frame.get("revision"),
                "cause": frame.get("reason")}
    if entry is None:
        cause = frame.get("cause") or frame.get("reason") or frame.get("status") or "withdrawn"
        return {"block_id": block_id, "state": "withdrawn", "revision": frame.get("revision"), "cause": cause}
    status = entry.get("status")
    content = entry.get("content") or None
    return {
        "block_id": block_id,
        "state": "committed" if status == "saved" else "conflict" if status == "conflict" else "preview",
        "status": status,
        "revision": entry.get("revision"),
        "ordinal": entry.get("delivery_ordinal"),
        "role": entry.get("role"),
        "content_type": content.get("type") if content else None,
        "markdown": content.get("markdown") if content else None,
        "source_hint": entry.get("source_hint"),
        "citations": entry.get("citations", []),
        "numbers": entry.get("numbers", []),
        "hints": entry.get("hints", []),
        "truncated": bool(entry.get("truncated")),
        "body_sha256": entry.get("body_sha256"),
        "conflict": entry.get("conflict"),
    }


@dataclass
class UIMessageStream:
    """The mapping state of one reader of one run (pure: frames in, parts out)."""

    run_id: str
    conversation_id: str | None = None
    blocks: set[str] = field(default_factory=set)
    text_open: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    finished: bool = False

    @property
    def text_id(self) -> str:
        return f"{message_id(self.run_id)}-text"

    def start(self) -> list[Part]:
        return [{"type": "start", "messageId": message_id(self.run_id),
                 "messageMetadata": {"run_id": self.run_id, "conversation_id": self.conversation_id}}]

    def opening(self) -> bytes:
        """:meth:`start` as the response's first SSE events."""
        return encode_all(self.start())

    def events(self, frame: Frame) -> bytes:
        """:meth:`parts` of one frame as SSE events, in one piece."""
        return encode_all(self.parts(frame))

    def parts(self, frame: Frame) -> list[Part]:
        """The parts one frame becomes (often none: e.g. a superseded frame of a block already shown)."""
        data = frame.data if isinstance(frame.data, dict) else {}
        stripped = next((reason for reason in _STRIPPED if data.get(reason)), None)
        event = frame.event
        if event == RESET:
            return self._reset(data)
        if event in BLOCK_EVENTS and data.get("block_id"):
            return self._block(data, stripped)
        if event == DONE:
            return self._finish()
        if stripped is not None:
            return []
        if event == CONTENT and isinstance(data.get("text"), str):
            out: list[Part] = []
            if not self.text_open:
                self.text_open = True
                out.append({"type": "text-start", "id": self.text_id})
            return [*out, {"type": "text-delta", "id": self.text_id, "delta": data["text"]}]
        if event == EVIDENCE:
            items = data.get("items", [])
            sources: list[Part] = [
                {"type": "source-document", "sourceId": item["source_id"], "mediaType": "text/plain",
                 "title": item.get("title", "")}
                for item in items if not item.get("redacted")
            ]
            return [*self._end_text(), *sources, {"type": "data-evidence", "id": "evidence", "data": {
                "items": items, "snapshot_id": data.get("snapshot_id"),
                "knowledge_version": data.get("knowledge_version")}}]
        if event == RUN_STATUS:
            self.status = {k: data.get(k) for k in ("state", "outcome", "closed", "reason")}
            return [{"type": "message-metadata", "messageMetadata": {"run": self.status}}]
        if event == PROGRESS:
            return [{"type": "data-progress", "data": {"stage": data.get("stage"), "detail": data.get("detail")},
                     "transient": True}]
        if event == ERROR:
            block_id, revision = data.get("block_id"), data.get("revision")
            return [{"type": "data-conflict", "id": f"conflict-{block_id}-{revision}",
                     "data": {"code": data.get("code"), "block_id": block_id, "revision": revision}}]
        if event == REJECTED:  # a refused new block: no block_id to hang it on
            return [{"type": "data-rejection", "id": f"rejection-{data.get('candidate_id')}-{data.get('block_index')}",
                     "data": {k: data.get(k) for k in ("candidate_id", "block_index", "reason", "rejection")}}]
        if event == SUMMARY:
            self.summary = {k: data.get(k) for k in ("last_id", "frame_count", "digest")}
            return self._end_text()
        return []

    def _block(self, data: dict[str, Any], stripped: str | None) -> list[Part]:
        block_id = str(data["block_id"])
        if stripped == "superseded":
            if block_id in self.blocks:
                return []  # a newer frame of this block follows; the part already holds the place
            payload: dict[str, Any] = {"block_id": block_id, "state": "superseded", "revision": data.get("revision")}
        elif stripped is not None:  # hidden after the end, or purged by a deletion
            payload = {"block_id": block_id, "state": "withdrawn", "revision": data.get("revision"),
                       "cause": stripped}
        elif "block" not in data:
            return []
        else:
            payload = block_data(block_id, data["block"], data)
        self.blocks.add(block_id)
        return [{"type": "data-block", "id": block_id, "data": payload}]

    def _reset(self, data: dict[str, Any]) -> list[Part]:
        """D8: what follows is the whole view from the run's first frame: forget this
        reader's state, and tell the client (transient: never part of the message)."""
        self.blocks.clear()
        self.text_open = False
        self.status, self.summary, self.finished = {}, None, False
        return [reset_part(data)]

    def _end_text(self) -> list[Part]:
        if not self.text_open:
            return []
        self.text_open = False
        return [{"type": "text-end", "id": self.text_id}]

    def _finish(self) -> list[Part]:
        if self.finished:
            return []
        self.finished = True
        return [*self._end_text(), {"type": "finish", "messageMetadata": {
            "run": self.status, "stream_summary": self.summary}}]

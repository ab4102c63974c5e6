"""The three forms a stream writes its frames in (:class:`~services.delivery.stream.EventStream`
writes whichever it is given): imprint's own SSE (D1/D2), the AI SDK UI message stream, and a
conversation's notices as AI SDK parts (D7). Each says its headers, its opening, each frame's
bytes and its closing; what a frame's bytes are is the frame's own (:attr:`Frame.sse`) or its
AI SDK mapping's (:mod:`imprint.delivery.ui_message_stream`), one call each."""

from __future__ import annotations

from typing import Protocol

from imprint.delivery.frames import Frame
from imprint.delivery.ui_message_stream import DONE_EVENT, HEADER, UIMessageStream, notice_event

RETRY_MS = 2000


class StreamFormat(Protocol):
    headers: list[tuple[bytes, bytes]]

    def opening(self) -> bytes: ...

    def frame(self, frame: Frame) -> bytes: ...

    def closing(self, terminal: bool) -> bytes: ...


class SSEFrames:
    """imprint's own SSE: ``id`` / ``event`` / ``data`` per frame (D1/D2)."""

    headers: list[tuple[bytes, bytes]] = []

    def opening(self) -> bytes:
        return f"retry: {RETRY_MS}\n\n".encode()

    def frame(self, frame: Frame) -> bytes:
        return frame.sse  # made with the frame, once for every client

    def closing(self, terminal: bool) -> bytes:
        return b""


class UIMessageParts:
    """The AI SDK UI message stream (:mod:`imprint.delivery.ui_message_stream`)."""

    headers = [(HEADER[0].encode(), HEADER[1].encode())]

    def __init__(self, mapping: UIMessageStream) -> None:
        self.mapping = mapping

    def opening(self) -> bytes:
        return self.mapping.opening()

    def frame(self, frame: Frame) -> bytes:
        return self.mapping.events(frame)

    def closing(self, terminal: bool) -> bytes:
        return DONE_EVENT if terminal else b""


class UINoticeParts:
    """A conversation's notices as AI SDK parts (D7, :func:`imprint.delivery.ui_message_stream.notice_event`)."""

    headers = [(HEADER[0].encode(), HEADER[1].encode())]

    def opening(self) -> bytes:
        return b""

    def frame(self, frame: Frame) -> bytes:
        return notice_event(frame)

    def closing(self, terminal: bool) -> bytes:
        return b""

"""The one SSE reader of the tests: a real HTTP client (httpx streaming) of
``/v1/runs/{run_id}/events`` and the parser of its frames.

- :func:`read_stream` reads until ``until(frames)`` holds (then drops the connection)
  or the server ends the stream; returns ``(frames, ended_by_server)``.
- :func:`read_frames` is the same read where ``until`` must hold: the frames, or an
  ``AssertionError`` when the stream ends first.
- :func:`read_notices` reads a conversation's notices (D7) the same way (``path`` picks the
  imprint SSE form or the AI SDK one).
- :func:`parse_sse` turns decoded lines into :class:`SSE` frames (also used on bodies
  read in-process)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class SSE:
    id: int | None
    event: str
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


Frame = SSE


def parse_sse(lines: Iterator[str], on_frame: Callable[[SSE], bool], comments: list[str] | None = None) -> None:
    """Feed decoded lines; ``on_frame`` returns True to stop."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields or "event" in fields:
                frame = SSE(int(fields["id"]) if "id" in fields else None, fields.get("event", "message"),
                            fields.get("data", ""))
                fields = {}
                if on_frame(frame):
                    return
            fields = {}
            continue
        if line.startswith(":"):
            if comments is not None:
                comments.append(line)
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value


def read_stream(base_url: str, run_id: str, token: str, *, last_event_id: int | None = None,
                via_query: bool = False, until: Callable[[list[SSE]], bool] | None = None,
                timeout: float = 20.0, comments: list[str] | None = None) -> tuple[list[SSE], bool]:
    """Read frames until ``until`` holds (then drop the connection) or the server ends
    the stream. Returns (frames, ended_by_server)."""
    return _read(f"{base_url}/v1/runs/{run_id}/events", {"Authorization": f"Bearer {token}"},
                 last_event_id=last_event_id, via_query=via_query, until=until, timeout=timeout, comments=comments)


def read_notices(base_url: str, conversation_id: str, token: str | None, *, last_event_id: int | None = None,
                 via_query: bool = False, until: Callable[[list[SSE]], bool] | None = None, timeout: float = 20.0,
                 path: str = "/v1/conversations/{id}/notices", ticket: str | None = None,
                 comments: list[str] | None = None) -> tuple[list[SSE], bool]:
    """A conversation's notices (D7), read as :func:`read_stream` reads a run."""
    url = base_url + path.format(id=conversation_id)
    if ticket is not None:
        url += f"?ticket={ticket}"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return _read(url, headers, last_event_id=last_event_id, via_query=via_query, until=until, timeout=timeout,
                 comments=comments)


def _read(url: str, headers: dict[str, str], *, last_event_id: int | None, via_query: bool,
          until: Callable[[list[SSE]], bool] | None, timeout: float,
          comments: list[str] | None) -> tuple[list[SSE], bool]:
    headers = {**headers, "Accept": "text/event-stream"}
    if last_event_id is not None:
        if via_query:
            url += ("&" if "?" in url else "?") + f"last_event_id={last_event_id}"
        else:
            headers["Last-Event-ID"] = str(last_event_id)
    frames: list[SSE] = []
    stopped = False

    def on_frame(frame: SSE) -> bool:
        nonlocal stopped
        frames.append(frame)
        if until is not None and until(frames):
            stopped = True
        return stopped

    deadline = time.monotonic() + timeout

    def lines(response: httpx.Response) -> Iterator[str]:
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"stream read timed out; frames so far: {[(f.id, f.event) for f in frames]}")
            yield line

    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(timeout, connect=5)) as response:
        assert response.status_code == 200, (response.status_code, response.read())
        parse_sse(lines(response), on_frame, comments)
    return frames, not stopped


def read_frames(base_url: str, run_id: str, token: str, *, last_event_id: int | None = None,
                until: Callable[[list[SSE]], bool], timeout: float = 30.0) -> list[SSE]:
    """Read until ``until(frames)`` holds, then drop the connection; fails when the stream ends first."""
    frames, _ = read_stream(base_url, run_id, token, last_event_id=last_event_id, until=until, timeout=timeout)
    if not until(frames):
        raise AssertionError(f"stream ended early: {[(f.id, f.event) for f in frames]}")
    return frames

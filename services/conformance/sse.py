"""Reading a stream as any client on the network would: the kit's own SSE reader over httpx.

It keeps what the cases judge: every event with its ``id``, ``event``, ``data`` and the moment
it arrived, the comments (keep-alives) and when they arrived, the response's status and
headers, and whether the response ended by itself. It reads the bytes the path hands it
(``Content-Encoding`` is recorded, the body decoded), and parses the HTML standard's way: a
blank line ends an event, ``data`` lines are joined by newlines, a line starting with ``:``
is a comment."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Event:
    id: int | None
    event: str
    data: str
    at: float
    """When it arrived (the kit's monotonic clock)."""

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.data)
        except ValueError:
            return self.data

    def wire(self) -> dict[str, Any]:
        """``{id, event, data}`` as the schemas describe it."""
        return {"id": self.id, "event": self.event, "data": self.json}


@dataclass
class Read:
    """One request's stream as the kit saw it."""

    url: str
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    comments: list[tuple[float, str]] = field(default_factory=list)
    retry: int | None = None
    ended: bool = False
    """The response finished by itself (not cut by the kit's wait)."""
    opened_at: float = 0.0
    error: str | None = None
    body: str = ""
    """A non-stream response's body (first 500 characters)."""

    @property
    def ids(self) -> list[int]:
        return [e.id for e in self.events if e.id is not None]

    def kinds(self) -> list[str]:
        return [e.event for e in self.events]

    def describe(self) -> str:
        ids = self.ids
        span = f"ids {ids[0]}..{ids[-1]}" if ids else "no ids"
        return (f"HTTP {self.status}, {len(self.events)} events ({span}), {len(self.comments)} comments"
                + (", ended" if self.ended else ", still open") + (f", error: {self.error}" if self.error else ""))


Until = Callable[[Read], bool]


async def read_stream(client: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None,
                      until: Until | None = None, timeout: float = 30.0,
                      on_event: Callable[[Event], None] | None = None) -> Read:
    """GET ``url`` and read its events until the response ends, ``until(read)`` holds, or
    ``timeout`` seconds passed (then ``ended`` stays false)."""
    read = Read(url=url, opened_at=time.monotonic())
    try:
        await asyncio.wait_for(_read(client, url, headers or {}, read, until, on_event), timeout)
    except TimeoutError:
        pass
    except httpx.HTTPError as error:
        read.error = f"{type(error).__name__}: {error}"
    return read


async def _read(client: httpx.AsyncClient, url: str, headers: dict[str, str], read: Read, until: Until | None,
                on_event: Callable[[Event], None] | None) -> None:
    async with client.stream("GET", url, headers={"Accept": "text/event-stream", **headers}) as response:
        read.status = response.status_code
        read.headers = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code != 200 or not read.headers.get("content-type", "").startswith("text/event-stream"):
            read.body = (await response.aread()).decode("utf-8", "replace")[:500]
            read.ended = True
            return
        if until is not None and until(read):
            return
        pending: dict[str, Any] = {"data": []}
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n" in buffer:
                line, buffer = buffer.split("\n", 1)
                line = line.rstrip("\r")
                if _line(read, pending, line, on_event) and until is not None and until(read):
                    return
            if until is not None and until(read):
                return
        read.ended = True


def _line(read: Read, pending: dict[str, Any], line: str, on_event: Callable[[Event], None] | None) -> bool:
    """Take one line; ``True`` when it completed an event or a comment."""
    now = time.monotonic()
    if line == "":
        if not pending["data"] and "event" not in pending and "id" not in pending:
            return False
        raw_id = pending.get("id")
        event = Event(id=int(raw_id) if raw_id is not None and raw_id.isdigit() else None,
                      event=pending.get("event", "message"), data="\n".join(pending["data"]), at=now)
        read.events.append(event)
        pending.clear()
        pending["data"] = []
        if on_event is not None:
            on_event(event)
        return True
    if line.startswith(":"):
        read.comments.append((now, line[1:].strip()))
        return True
    name, _, value = line.partition(":")
    value = value[1:] if value.startswith(" ") else value
    if name == "data":
        pending["data"].append(value)
    elif name in ("id", "event"):
        pending[name] = value
    elif name == "retry" and value.isdigit():
        read.retry = int(value)
    return False


def ended_with_done(read: Read) -> bool:
    return any(e.event == "done" for e in read.events)


def ui_parts(read: Read) -> list[Any]:
    """The AI SDK stream's parts (each event's data as JSON; ``[DONE]`` as the string)."""
    return [e.json for e in read.events]

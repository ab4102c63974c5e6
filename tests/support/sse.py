"""A real HTTP SSE reader for tests (httpx streaming)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Frame:
    id: int | None
    event: str
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


def read_frames(
    base_url: str,
    run_id: str,
    token: str,
    *,
    last_event_id: int | None = None,
    until: Callable[[list[Frame]], bool],
    timeout: float = 30.0,
) -> list[Frame]:
    """Read ``/v1/runs/{run_id}/events`` until ``until(frames)`` holds, then drop the connection."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    frames: list[Frame] = []
    deadline = time.monotonic() + timeout
    fields: dict[str, str] = {}
    with httpx.stream("GET", f"{base_url}/v1/runs/{run_id}/events", headers=headers,
                      timeout=httpx.Timeout(timeout, connect=5)) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; frames so far: {[(f.id, f.event) for f in frames]}")
            if line == "":
                if "data" in fields or "event" in fields:
                    frames.append(Frame(int(fields["id"]) if "id" in fields else None,
                                        fields.get("event", "message"), fields.get("data", "")))
                    if until(frames):
                        return frames
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value
    if not until(frames):
        raise AssertionError(f"stream ended early: {[(f.id, f.event) for f in frames]}")
    return frames

"""The real AI SDK client tier: Node with the ``ai`` package (one pinned version of
each line, installed side by side under npm aliases by ``make test``: ``npm ci
--prefix tests/node``) reading a real Delivery (uvicorn, PostgreSQL, Kafka)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.common.settings import Settings
from tests.integration.delivery.support import Delivery, start_delivery

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "read_ui_message.mjs"
NODE22 = HERE / "node_modules" / ".bin" / "node"
"""Node 22 from the npm package ``node`` (ai 7.x needs Node >= 22; the machine's own is 20)."""
LINES = {"ai5": "node", "ai6": "node", "ai7": str(NODE22)}
"""Which Node runs which ``ai`` line: 5.x and 6.x on the system Node, 7.x on Node 22."""


@dataclass
class Reader:
    """One ``read_ui_message.mjs`` process: the SDK's own transport + readUIMessageStream."""

    line: str
    process: subprocess.Popen[str]

    def exited(self) -> bool:
        return self.process.poll() is not None

    def result(self, timeout: float = 60) -> dict[str, Any]:
        out, err = self.process.communicate(timeout=timeout)
        assert out.strip(), f"{self.line} printed nothing; stderr:\n{err}"
        return json.loads(out.strip().splitlines()[-1])


def start_reader(line: str, api: str, chat_id: str, token: str, last_event_id: int | None = None) -> Reader:
    extra = [str(last_event_id)] if last_event_id is not None else []
    return start_script(line, SCRIPT, api, chat_id, token, *extra)


def start_script(line: str, script: Path, *args: str) -> Reader:
    """``script`` run by the Node of ``line`` with the ``ai`` package of that line."""
    for module in ("ai5", "ai6", "ai7"):
        if not (HERE / "node_modules" / module).exists():
            raise RuntimeError("the AI SDK client is not installed: run `make test` (npm ci --prefix tests/node)")
    node = LINES[line]
    if shutil.which(node) is None and not Path(node).exists():
        raise RuntimeError(f"no {node} for {line}")
    process = subprocess.Popen([node, str(script), line, *args], cwd=HERE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Reader(line, process)


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 0.5,
                                                          "stream_open_wait_seconds": 5.0}))

"""Parts of the stack as real processes for the e2e, fault and integration tiers: the
one launcher (:class:`services.common.launcher.Launcher`) configured by one test's
isolated settings, as a context manager that starts ``parts``, waits until they are
ready and, on the way out, stops every child (and prints the log tails on failure)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import httpx

from services.common.launcher import PARTS, Launcher
from services.common.launcher import child_environment as environment  # noqa: F401 - for `imprint` CLI tests
from services.common.settings import Settings

ALL_PARTS = PARTS


class Stack(Launcher):
    def __init__(self, settings: Settings, parts: tuple[str, ...] = ALL_PARTS) -> None:
        super().__init__(settings, grace=20.0)
        self.parts = parts

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.http_host}:{self.settings.http_port}"

    def __enter__(self) -> Stack:
        for part in self.parts:
            self.start(part)
        self.wait_ready()
        return self

    def wait_for_run(self, run_id: str, token: str, timeout: float = 30) -> dict:
        """Poll ``GET /v1/runs/{run_id}`` until Delivery knows the run (it learns runs from imprint.runs.v1)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = httpx.get(f"{self.base_url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
            if response.status_code == 200:
                return response.json()
            time.sleep(0.2)
        raise AssertionError(f"delivery never learned run {run_id}:\n" + self.log("journal")[-3000:])

    def wait_for_line(self, name: str, marker: str, timeout: float = 90) -> str:
        """The first line of child ``name``'s log that starts with ``marker`` (what a test's
        runtime prints as it reaches a point), waited for while the child lives."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log(name).splitlines():
                if line.startswith(marker):
                    return line
            assert self.children[name].returncode is None, self.log(name)[-3000:]
            time.sleep(0.1)
        raise AssertionError(f"{name} never printed {marker!r}:\n{self.log(name)[-3000:]}")

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_all()
        if e is not None:
            for name in self.children:
                print(self.tail(name, 3000), file=sys.stderr)


def inspected(settings: Settings, run_id: str) -> dict[str, Any]:
    """``imprint inspect --run <run_id> --json`` of the stack's stores."""
    done = subprocess.run([sys.executable, "-m", "services.cli", "inspect", "--run", run_id, "--json"],
                          env=environment(settings), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def inspected_until(settings: Settings, run_id: str, holds: Callable[[dict[str, Any]], bool],
                    timeout: float = 60) -> dict[str, Any]:
    """:func:`inspected` again until ``holds`` (or ``timeout`` passed: the last document)."""
    deadline = time.monotonic() + timeout
    while True:
        document = inspected(settings, run_id)
        if holds(document) or time.monotonic() > deadline:
            return document
        time.sleep(0.5)

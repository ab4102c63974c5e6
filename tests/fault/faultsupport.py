"""Process control for the fault tier: parts of the stack started as real processes,
optionally through a crash wrapper (a module that arms a SIGKILL at an exact point of
the real code path, then runs the real ``imprint serve <part>``), and killed for real."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from services.common.settings import Settings
from tests.support.stack import Stack, environment


class FaultStack(Stack):
    def launch(self, part: str, module: str, *args: str, env: dict[str, str] | None = None,
               settings: Settings | None = None) -> subprocess.Popen[bytes]:
        """Start ``python -m <module> <args>`` as ``part`` with the test's configuration
        (or ``settings``) plus ``env``."""
        variables = environment(settings or self.settings)
        variables.update(env or {})
        log = open(self.log_dir / f"{part}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen([sys.executable, "-m", module, *args], env=variables,
                                   stdout=log, stderr=subprocess.STDOUT)
        self.processes[part] = process
        return process

    def serve(self, part: str, *, env: dict[str, str] | None = None, settings: Settings | None = None) -> None:
        """The real ``imprint serve <part>``."""
        self.launch(part, "services.cli", "serve", part, env=env, settings=settings)

    def wait_exit(self, part: str, timeout: float = 60) -> int:
        process = self.processes[part]
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{part} did not exit:\n{self.log(part)[-3000:]}") from None

    def kill9(self, part: str) -> None:
        process = self.processes.pop(part)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL


def wait_until(predicate, timeout: float = 30, interval: float = 0.1, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)

"""``imprint up``: the whole stack as supervised child processes.

Each part runs as ``python -m services.cli serve <part>``; its pid is kept in
``<state>/run/<part>.pid`` and it is stopped by that pid only. A part that dies
is restarted with a back-off; Ctrl-C stops them all."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)
ORDER = ("publication", "relay", "journal", "delivery")


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.run_dir = Path(settings.state_dir) / "run"
        self.log_dir = Path(settings.state_dir) / "logs"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, float] = {}

    def start(self, part: str) -> None:
        logfile = open(self.log_dir / f"{part}.log", "ab")  # noqa: SIM115 - owned by the child
        child = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", part],
            stdout=logfile,
            stderr=subprocess.STDOUT,
            env={**os.environ, "IMPRINT_STATE_DIR": str(self.settings.state_dir)},
        )
        self.children[part] = child
        (self.run_dir / f"{part}.pid").write_text(str(child.pid))
        log.info("part started", part=part, pid=child.pid, log=str(self.log_dir / f"{part}.log"))

    def start_all(self) -> None:
        for part in ORDER:
            self.start(part)

    def watch(self) -> None:
        for part, child in list(self.children.items()):
            code = child.poll()
            if code is None:
                continue
            last = self.restarts.get(part, 0.0)
            if time.monotonic() - last < 2.0:
                continue
            log.warning("part exited; restarting", part=part, code=code)
            self.restarts[part] = time.monotonic()
            self.start(part)

    def stop_all(self) -> None:
        for part in reversed(ORDER):
            child = self.children.get(part)
            if child is None:
                continue
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for part, child in self.children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            (self.run_dir / f"{part}.pid").unlink(missing_ok=True)
        log.info("stack stopped")

    def wait_ready(self, timeout: float = 60.0) -> bool:
        url = f"http://{self.settings.http_host}:{self.settings.http_port}/readyz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.watch()
            try:
                with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.3)
        return False


def run_stack(settings: Settings, *, demo: bool, exit_after_demo: bool) -> int:
    if settings.uses_development_secret:
        log.warning("IMPRINT_AUTH_SECRET is the development default; set it before exposing the gateway")
    log.info("store", backend="postgresql" if settings.uses_postgres else f"sqlite in {settings.state_dir}/data")
    supervisor = Supervisor(settings)
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    supervisor.start_all()
    code = 0
    try:
        if not supervisor.wait_ready():
            log.error("the stack did not become ready; see the logs", logs=str(supervisor.log_dir))
            return 1
        print(f"imprint is up: http://{settings.http_host}:{settings.http_port}/", flush=True)
        if demo:
            from services.demo import run_demo

            code = asyncio.run(run_demo(settings, watch=True))
            if exit_after_demo:
                return code
        print("press Ctrl-C to stop", flush=True)
        while not stopping:
            supervisor.watch()
            time.sleep(0.5)
    finally:
        supervisor.stop_all()
    return code

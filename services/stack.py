"""``imprint up``: the whole stack as supervised child processes.

Each part runs as ``python -m services.cli serve <part>``, started by the one
launcher (:mod:`services.common.launcher`): its pid is kept in
``<state>/run/<part>.pid``, its log in ``<state>/logs/<part>.log``, and it is
stopped by that pid only. A part that dies is restarted with a back-off; Ctrl-C
stops them all."""

from __future__ import annotations

import asyncio
import signal
import time

from services.common.backends import backend_for
from services.common.launcher import PARTS, Launcher
from services.common.observability import get_logger
from services.common.settings import Settings

log = get_logger(__name__)
RESTART_BACKOFF = 2.0


class Supervisor:
    """Keeps every part running through :class:`Launcher`: a part that exits is started
    again, at most once per ``RESTART_BACKOFF`` seconds."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.launcher = Launcher(settings)
        self.log_dir = self.launcher.log_dir
        self.restarts: dict[str, float] = {}

    def start_all(self) -> None:
        for part in PARTS:
            child = self.launcher.start(part)
            log.info("part started", part=part, pid=child.pid, log=str(child.log_path))

    def watch(self) -> None:
        for child in self.launcher.exited():
            if time.monotonic() - self.restarts.get(child.name, 0.0) < RESTART_BACKOFF:
                continue
            log.warning("part exited; restarting", part=child.name, code=child.returncode)
            self.restarts[child.name] = time.monotonic()
            self.launcher.restart(child.name)

    def stop_all(self) -> None:
        self.launcher.stop_all()
        log.info("stack stopped")

    def wait_ready(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.watch()
            if all(self.launcher.ready(part) for part in PARTS):
                return True
            time.sleep(0.3)
        return False


def run_stack(settings: Settings, *, demo: bool, exit_after_demo: bool) -> int:
    if settings.uses_development_secret:
        log.warning("IMPRINT_AUTH_SECRET is the development default; set it before exposing the gateway")
    log.info("store", backend=backend_for(settings).describe())
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

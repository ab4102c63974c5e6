"""Instances of the stack's parts as real processes (``imprint serve <part>``) through the
one launcher (:class:`services.common.launcher.Launcher`), supervised the way ``imprint
up`` supervises them: an instance that exits on its own is started again, and every such
exit is counted with its code (the tests print them). An instance the test SIGKILLs on
purpose is started again only when the test says so.

Several instances of one part are named ``<part>``, ``<part>-2``, …; each Delivery
instance gets its own HTTP port."""

from __future__ import annotations

import signal
import sys
import threading
from types import TracebackType

from services.common.launcher import PARTS, Launcher
from services.common.settings import Settings
from tests.support.net import free_port


class Parts:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.launcher = Launcher(settings, grace=10.0)
        self.exits: list[tuple[str, int]] = []
        self.kills: list[str] = []
        self._down: set[str] = set()  # killed on purpose, waiting for the test's restart
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._supervise, name="parts-supervisor", daemon=True)

    # ---------------------------------------------------------------- launching
    def serve(self, part: str, instance: int = 1) -> str:
        name = part if instance == 1 else f"{part}-{instance}"
        settings = self.settings
        if part == "delivery" and instance > 1:
            settings = settings.model_copy(update={"http_port": free_port()})
        with self._lock:
            self.launcher.start(part, name=name, settings=settings)
        return name

    def serve_all(self, instances: int = 1, *, timeout: float = 120) -> Parts:
        for part in PARTS:
            for i in range(1, instances + 1):
                self.serve(part, i)
        self.launcher.wait_ready(timeout=timeout)
        if not self._monitor.is_alive():
            self._monitor.start()
        return self

    @property
    def delivery_urls(self) -> list[str]:
        return [f"http://{c.settings.http_host}:{c.settings.http_port}"
                for c in self.launcher.children.values() if c.part == "delivery"]

    def names(self, part: str | None = None) -> list[str]:
        return [n for n, c in self.launcher.children.items() if part is None or c.part == part]

    # ------------------------------------------------------------------- faults
    def kill9(self, name: str) -> int:
        """SIGKILL ``name`` (it stays down until :meth:`restart`); its exit code. A child that
        had exited on its own just before is counted as such, not as a kill."""
        with self._lock:
            self._down.add(name)
            code = self.launcher.kill(name)
            if code == -signal.SIGKILL:
                self.kills.append(name)
            else:
                self.exits.append((name, code))
        return code

    def restart(self, name: str, *, wait: bool = False) -> None:
        with self._lock:
            self.launcher.restart(name)
            self._down.discard(name)
        if wait:
            self.launcher.wait_ready([name])

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for child in self.launcher.exited():
                    if child.name in self._down or self._stop.is_set():
                        continue
                    self.exits.append((child.name, child.returncode or 0))
                    self.launcher.restart(child.name)

    # ------------------------------------------------------------------ reports
    def tails(self, chars: int = 2500) -> str:
        return "\n".join(self.launcher.tail(name, chars) for name in self.launcher.children)

    def __enter__(self) -> Parts:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._monitor.is_alive():
            self._monitor.join(5)
        self.launcher.stop_all()
        if e is not None:
            print(self.tails(), file=sys.stderr, flush=True)

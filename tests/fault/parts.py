"""Instances of the stack's parts as real processes (``imprint serve <part>``), supervised
the way ``imprint up`` supervises them: an instance that exits on its own is started
again, and every such exit is counted with its code (the test prints them). An instance
the test SIGKILLs on purpose is started again only when the test says so.

Several instances of one part are named ``<part>`` , ``<part>-2``, …; Delivery
instances each get their own HTTP port."""

from __future__ import annotations

import signal
import threading
import time
from types import TracebackType

import httpx

from services.common.settings import Settings
from tests.conftest import free_port
from tests.fault.faultsupport import FaultStack

PARTS = ("publication", "relay", "journal", "delivery")


class Parts:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stack = FaultStack(settings, parts=())
        self.specs: dict[str, tuple[str, dict[str, str]]] = {}
        self.ports: dict[str, int] = {}
        self.exits: list[tuple[str, int]] = []
        self.kills: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._supervise, name="parts-supervisor", daemon=True)

    # ---------------------------------------------------------------- launching
    def serve(self, part: str, instance: int = 1) -> str:
        name = part if instance == 1 else f"{part}-{instance}"
        env: dict[str, str] = {}
        if part == "delivery":
            port = self.settings.http_port if instance == 1 else free_port()
            self.ports[name] = port
            env["IMPRINT_HTTP_PORT"] = str(port)
        self.specs[name] = (part, env)
        with self._lock:
            self.stack.launch(name, "services.cli", "serve", part, env=env)
        return name

    def serve_all(self, instances: int = 1) -> Parts:
        for part in PARTS:
            for i in range(1, instances + 1):
                self.serve(part, i)
        self.wait_ready()
        if not self._monitor.is_alive():
            self._monitor.start()
        return self

    @property
    def delivery_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports.values()]

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        for url in self.delivery_urls:
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"{url} never became ready:\n" + self.tails())
                time.sleep(0.2)

    # ------------------------------------------------------------------- faults
    def kill9(self, name: str) -> None:
        with self._lock:
            process = self.stack.processes.pop(name)
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=10) == -signal.SIGKILL, f"{name} was not killed by SIGKILL"
            self.kills.append(name)

    def restart(self, name: str) -> None:
        part, env = self.specs[name]
        with self._lock:
            assert name not in self.stack.processes, f"{name} is still running"
            self.stack.launch(name, "services.cli", "serve", part, env=env)

    def names(self, part: str | None = None) -> list[str]:
        return [n for n, (p, _) in self.specs.items() if part is None or p == part]

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name, process in list(self.stack.processes.items()):
                    code = process.poll()
                    if code is None or self._stop.is_set():
                        continue
                    self.exits.append((name, code))
                    part, env = self.specs[name]
                    self.stack.launch(name, "services.cli", "serve", part, env=env)

    # ------------------------------------------------------------------ reports
    def tails(self, chars: int = 2500) -> str:
        return "\n".join(f"----- {n} -----\n{self.stack.log(n)[-chars:]}" for n in self.specs)

    def __enter__(self) -> Parts:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._monitor.is_alive():
            self._monitor.join(5)
        for name in list(self.stack.processes):
            self.stack.stop(name)
        if e is not None:
            print(self.tails(), flush=True)

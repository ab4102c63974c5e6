"""The stack as real processes, children of the one launcher
(:class:`services.common.launcher.Launcher`: ``python -m services.cli serve <part>``, exactly
what ``imprint serve`` runs), and what /proc says about them: CPU seconds and RSS."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.launcher import Launcher
from services.common.processes import child_pids
from services.common.settings import Settings

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (all its threads), from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def read_rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE_KB
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def tree_rss_kb(pid: int) -> int | None:
    """RSS of a process and of every process under it, summed (pages two of them share are
    counted twice: an upper bound), from /proc; ``None`` once the process is gone."""
    total: int | None = None
    pending = [pid]
    while pending:
        current = pending.pop()
        rss = read_rss_kb(current)
        if rss is None:
            continue
        total = (total or 0) + rss
        pending.extend(child_pids(current))
    return total


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a server and of everything under it: its own utime + stime, the
    cutime + cstime of the children it has reaped (a PostgreSQL backend that served a
    connection and exited), and utime + stime of every live descendant. A backend that ends
    between two readings moves from the live sum into its parent's reaped sum, so the
    difference of two readings is the tree's CPU between them. ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    total = sum(int(v) for v in fields[11:15]) / TICKS
    pending = child_pids(pid)
    while pending:
        current = pending.pop()
        total += cpu_seconds(current) or 0.0
        pending.extend(child_pids(current))
    return total


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` (IPv4 or IPv6) of this machine, from
    /proc/net and the processes' descriptors; ``None`` when none is found (another
    user's process, a broker in a container)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") in inodes:
                    return int(entry)
        except OSError:
            continue
    return None


INFRA = ("kafka", "postgresql")
"""The servers every stack the bench measures runs on: their CPU counts as the stack's."""


def infra_pids(settings: Settings) -> dict[str, int]:
    """The broker (the process listening on the first bootstrap address's port) and the
    PostgreSQL server (the postmaster listening on the database URL's port), by name; a
    server not found on this machine is left out. Both are shared with whatever else uses
    them meanwhile (other engineers' tests land in their CPU as in the machine's)."""
    from urllib.parse import urlparse

    ports = {"kafka": int(settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1]),
             "postgresql": urlparse(str(settings.database_url)).port or 5432}
    found = {name: listener_pid(port) for name, port in ports.items()}
    return {name: pid for name, pid in found.items() if pid is not None}


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return total - idle, total


def machine_cpu_seconds() -> float:
    """Core-seconds the whole machine has been busy (every process, kernel included)."""
    return machine_busy()[0] / TICKS


def own_cpu_seconds() -> float:
    """utime + stime of this process, all its threads."""
    times = os.times()
    return times.user + times.system


@dataclass
class Window:
    """CPU used per process (and by the whole machine) between two instants."""

    started: float
    cpu: dict[str, float]
    machine: tuple[float, float]
    bench: float = 0.0
    """The bench process's own CPU seconds (its producer, readers and SSE clients)."""
    peak_rss_kb: dict[str, int] = field(default_factory=dict)
    infra: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the broker's and PostgreSQL's process trees (:data:`INFRA`)."""


class Sampler(threading.Thread):
    """Samples every part's RSS twice a second, so a window can report its peak."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.stack = stack
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()

    def reset(self) -> None:
        self.peaks = {}

    def run(self) -> None:
        while not self._stop.wait(0.5):
            for part, pid in self.stack.pids().items():
                rss = read_rss_kb(pid)
                if rss is not None:
                    self.peaks[part] = max(self.peaks.get(part, 0), rss)

    def stop(self) -> None:
        self._stop.set()


class Stack:
    """Some of imprint's parts (publication, journal, delivery) as children of one launcher,
    all logging at ``log_level``, measured by pid; stopped by pid, through the launcher."""

    def __init__(self, settings: Settings, parts: tuple[str, ...], log_level: str = "WARNING") -> None:
        self.settings = settings
        self.parts = parts
        self.launcher = Launcher(settings.model_copy(update={"log_level": log_level}), grace=20.0)
        self.sampler = Sampler(self)
        self._infra: dict[str, int] | None = None

    def infra(self) -> dict[str, int]:
        """The broker's and PostgreSQL's pids (:func:`infra_pids`), found once."""
        if self._infra is None:
            self._infra = infra_pids(self.settings)
        return self._infra

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.http_host}:{self.settings.http_port}"

    def start(self) -> None:
        for part in self.parts:
            self.launcher.start(part)
        self.sampler.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Every part ready (:meth:`Launcher.wait_ready`), or a ``LaunchError`` with the log tails."""
        self.launcher.wait_ready(timeout=timeout)

    def add(self, part: str, name: str) -> None:
        """One more instance of ``part`` (same settings, so the same consumer group) as ``name``."""
        self.launcher.start(part, name=name)

    def remove(self, name: str) -> None:
        self.launcher.stop(name, grace=30.0)

    def pids(self) -> dict[str, int]:
        """Every part instance still meant to run (not removed or stopped), by name."""
        children = list(self.launcher.children.values())  # the sampler's thread reads them too
        return {child.name: child.pid for child in children if not child.stopped}

    def check_alive(self) -> None:
        for child in self.launcher.exited():
            raise RuntimeError(f"{child.name} exited with {child.returncode}:\n{self.log(child.name)[-3000:]}")

    def log(self, part: str) -> str:
        return self.launcher.log(part)

    def window(self) -> Window:
        self.sampler.reset()
        return Window(time.perf_counter(), {p: cpu_seconds(pid) or 0.0 for p, pid in self.pids().items()},
                      machine_busy(), own_cpu_seconds(),
                      infra={n: tree_cpu_seconds(pid) or 0.0 for n, pid in self.infra().items()})

    def close(self, window: Window) -> dict[str, Any]:
        """CPU seconds per part since ``window`` opened, the machine's busy core-seconds
        (every process and the kernel, /proc/stat) and busy cores, peak RSS. ``stack_cpu_s``
        is the stack's own CPU: its parts, the broker and PostgreSQL (``infra_cpu_s``), apart
        from the bench's producer and SSE clients (``bench_cpu_s``)."""
        seconds = time.perf_counter() - window.started
        busy, total = machine_busy()
        cpu = {p: round((cpu_seconds(pid) or 0.0) - window.cpu.get(p, 0.0), 3) for p, pid in self.pids().items()}
        infra = {n: round((tree_cpu_seconds(pid) or 0.0) - window.infra[n], 3)
                 for n, pid in self.infra().items() if n in window.infra}
        cores = os.cpu_count() or 1
        machine = (busy - window.machine[0]) / max(1, total - window.machine[1])
        return {
            "seconds": round(seconds, 3),
            "cpu_s": cpu,
            "machine_cpu_s": round((busy - window.machine[0]) / TICKS, 3),
            "bench_cpu_s": round(own_cpu_seconds() - window.bench, 3),
            "infra_cpu_s": infra,
            "stack_cpu_s": round(sum(cpu.values()) + sum(infra.values()), 3),
            "cpu_util": {p: round(c / seconds, 3) for p, c in cpu.items()} if seconds > 0 else {},
            "machine_busy_cores": round(machine * cores, 2),
            "peak_rss_mb": {p: round(kb / 1024, 1) for p, kb in self.sampler.peaks.items()},
            "rss_mb": {p: round((read_rss_kb(pid) or 0) / 1024, 1) for p, pid in self.pids().items()},
        }

    def stop(self) -> None:
        self.sampler.stop()
        self.launcher.stop_all()

"""The stack as real processes, children of the one launcher
(:class:`services.common.launcher.Launcher`: ``python -m services.cli serve <part>``, exactly
what ``imprint serve`` runs), and what /proc says about them: CPU seconds and RSS."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from services.common.launcher import Launcher, child_pids
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
                      machine_busy(), own_cpu_seconds())

    def close(self, window: Window) -> dict[str, Any]:
        """CPU seconds per part since ``window`` opened, the machine's busy core-seconds
        (every process and the kernel, /proc/stat) and busy cores, peak RSS."""
        seconds = time.perf_counter() - window.started
        busy, total = machine_busy()
        cpu = {p: round((cpu_seconds(pid) or 0.0) - window.cpu.get(p, 0.0), 3) for p, pid in self.pids().items()}
        cores = os.cpu_count() or 1
        machine = (busy - window.machine[0]) / max(1, total - window.machine[1])
        return {
            "seconds": round(seconds, 3),
            "cpu_s": cpu,
            "machine_cpu_s": round((busy - window.machine[0]) / TICKS, 3),
            "bench_cpu_s": round(own_cpu_seconds() - window.bench, 3),
            "cpu_util": {p: round(c / seconds, 3) for p, c in cpu.items()} if seconds > 0 else {},
            "machine_busy_cores": round(machine * cores, 2),
            "peak_rss_mb": {p: round(kb / 1024, 1) for p, kb in self.sampler.peaks.items()},
            "rss_mb": {p: round((read_rss_kb(pid) or 0) / 1024, 1) for p, pid in self.pids().items()},
        }

    def stop(self) -> None:
        self.sampler.stop()
        self.launcher.stop_all()

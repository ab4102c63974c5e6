"""The stack as real processes (``python -m services.cli serve <part>``, exactly what
``imprint serve`` runs) and what /proc says about them: CPU seconds and RSS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.settings import Settings

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def environment(settings: Settings, log_level: str = "WARNING") -> dict[str, str]:
    """The process environment for one part: only the existing ``IMPRINT_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    env.update(
        IMPRINT_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        IMPRINT_STATE_DIR=str(settings.state_dir),
        IMPRINT_TOPIC_PREFIX=settings.topic_prefix,
        IMPRINT_GROUP_PREFIX=settings.group_prefix,
        IMPRINT_HTTP_HOST=settings.http_host,
        IMPRINT_HTTP_PORT=str(settings.http_port),
        IMPRINT_AUTH_SECRET=settings.auth_secret.get_secret_value(),
        IMPRINT_LOG_LEVEL=log_level,
    )
    if settings.database_url:
        env["IMPRINT_DATABASE_URL"] = settings.database_url
    if settings.database_schema:
        env["IMPRINT_DATABASE_SCHEMA"] = settings.database_schema
    return env


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
        pending.extend(_children(current))
    return total


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started: its threads' ``children`` lists, or, on a kernel
    without them, every process whose parent it is."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                children.extend(int(child) for child in handle.read().split())
        except FileNotFoundError:
            return [p for p in _all_pids() if _parent(p) == pid]
        except OSError:
            continue
    return children


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


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


@dataclass
class Window:
    """CPU used per process (and by the whole machine) between two instants."""

    started: float
    cpu: dict[str, float]
    machine: tuple[float, float]
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
            for part, process in list(self.stack.processes.items()):
                rss = read_rss_kb(process.pid)
                if rss is not None:
                    self.peaks[part] = max(self.peaks.get(part, 0), rss)

    def stop(self) -> None:
        self._stop.set()


class Stack:
    """publication, relay, journal and delivery as child processes, stopped by pid."""

    def __init__(self, settings: Settings, parts: tuple[str, ...], log_level: str = "WARNING") -> None:
        self.settings = settings
        self.parts = parts
        self.log_level = log_level
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.log_dir = Path(settings.state_dir) / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.sampler = Sampler(self)

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.http_host}:{self.settings.http_port}"

    def start(self) -> None:
        for part in self.parts:
            log = open(self.log_dir / f"{part}.log", "ab")  # noqa: SIM115
            self.processes[part] = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "serve", part],
                env=environment(self.settings, self.log_level), stdout=log, stderr=subprocess.STDOUT)
        self.sampler.start()

    def add(self, part: str, name: str) -> None:
        """One more instance of ``part`` (same settings, so the same consumer group) as ``name``."""
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", part],
            env=environment(self.settings, self.log_level), stdout=log, stderr=subprocess.STDOUT)

    def remove(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()

    def pids(self) -> dict[str, int]:
        return {part: p.pid for part, p in self.processes.items()}

    def check_alive(self) -> None:
        for part, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{part} exited with {process.returncode}:\n{self.log(part)[-3000:]}")

    def log(self, part: str) -> str:
        path = self.log_dir / f"{part}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def window(self) -> Window:
        self.sampler.reset()
        return Window(time.perf_counter(), {p: cpu_seconds(pid) or 0.0 for p, pid in self.pids().items()},
                      machine_busy())

    def close(self, window: Window) -> dict[str, Any]:
        """CPU seconds per part since ``window`` opened, the machine's load, peak RSS."""
        seconds = time.perf_counter() - window.started
        busy, total = machine_busy()
        cpu = {p: round((cpu_seconds(pid) or 0.0) - window.cpu.get(p, 0.0), 3) for p, pid in self.pids().items()}
        cores = os.cpu_count() or 1
        machine = (busy - window.machine[0]) / max(1, total - window.machine[1])
        return {
            "seconds": round(seconds, 3),
            "cpu_s": cpu,
            "cpu_util": {p: round(c / seconds, 3) for p, c in cpu.items()} if seconds > 0 else {},
            "machine_busy_cores": round(machine * cores, 2),
            "peak_rss_mb": {p: round(kb / 1024, 1) for p, kb in self.sampler.peaks.items()},
            "rss_mb": {p: round((read_rss_kb(pid) or 0) / 1024, 1) for p, pid in self.pids().items()},
        }

    def stop(self) -> None:
        self.sampler.stop()
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

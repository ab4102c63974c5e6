"""The process tree as Linux's /proc shows it: which processes one started, and its parent.

The launcher finds a wrapped child's own process with it (:class:`services.common.launcher.Child`),
and the bench sums the CPU and memory of a part's whole tree (``bench.procs``)."""

from __future__ import annotations

import os


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started and that still exist: its threads' ``children`` lists
    in /proc, or, on a kernel without them, every process whose parent it is."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    started: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                started.extend(int(found) for found in handle.read().split())
        except FileNotFoundError:
            return [p for p in _all_pids() if parent_of(p) == pid]
        except OSError:
            continue
    return started


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def parent_of(pid: int) -> int | None:
    """The pid of ``pid``'s parent, or ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None

"""py-spy profiles of the running parts (``py-spy record --pid … --gil --format raw``), and
their top costs: the functions most samples were *in* (self) and the frames most
samples passed *through* (inclusive, minus the event-loop/thread plumbing every
sample has).

Only the thread holding the GIL is sampled (``--gil``): what Python ran. Without it, a
thread waiting to take the GIL back is sampled in whatever frame it was preempted in, as
if it ran there — under an overload burst the Journal's worker thread, waiting on its
event loop's decoding, put 43 % of its "on-CPU" samples in eventsourcing's
``DatetimeAsISO.encode`` (1 % with ``--gil``)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PLUMBING = ("_bootstrap", "_bootstrap_inner", "Thread.run", "run (threading", "_worker (concurrent",
            "run_forever", "_run_once", "_run (asyncio", "<module>", "main (services/cli", "_serve (services/cli",
            "run (asyncio/runners", "Runner.run", "asyncio.run", "BaseEventLoop", "Handle._run", "spawn_main",
            "_run_module_as_main", "_run_code", "WorkItem.run", "run_until_complete")


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return found if Path(found).exists() else None


def start(pid: int, out: Path, seconds: float, rate: int = 100) -> subprocess.Popen[bytes] | None:
    binary = py_spy()
    if binary is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([binary, "record", "--pid", str(pid), "--duration", str(int(math.ceil(seconds))),
                             "--rate", str(rate), "--gil", "--format", "raw", "--nonblocking", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)



def finish(process: subprocess.Popen[bytes] | None, timeout: float = 120) -> str | None:
    if process is None:
        return "py-spy not installed (pip install -c constraints.txt -e '.[bench]')"
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return "py-spy did not finish"
    return None if process.returncode == 0 else err.decode(errors="replace")[-400:]


def _frame_name(frame: str) -> str:
    # raw format frames look like "function (path/to/file.py:123)"
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/libs/", "/services/", "/bench/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker in ("/services/", "/bench/"):
                path = marker.strip("/") + "/" + path
            break
    return f"{name} ({path})"


WAITS = ("Connection.wait", "select (selectors", "EpollSelector.select", "Condition.wait", "Event.wait",
         "Queue.get", "lock.acquire", "sleep", "_worker (concurrent", "wait (threading", "_recv", "recv_into",
         "poll (", "BaseSelectorEventLoop._write_to_self", "wait_c", "_wait_gen")


def _is_wait(leaf: str) -> bool:
    return any(w in leaf for w in WAITS)


def top_costs(raw: Path, n: int = 10) -> dict[str, Any]:
    """Top ``n`` frames of a py-spy raw (collapsed) profile. Samples whose innermost frame
    is a wait (a socket/select, a lock, a queue, psycopg's ``Connection.wait``) are
    counted as ``waiting``; the shares in ``cpu`` are of the remaining (on-CPU) samples:
    ``self`` = the function the sample was in, ``inclusive`` = every frame it passed
    through, minus the event-loop/thread plumbing all samples share and minus frames
    that hand ≥ 90% of their samples to a single callee (the callee is listed instead)."""
    own: Counter[str] = Counter()
    through: Counter[str] = Counter()
    edges: Counter[tuple[str, str]] = Counter()
    total = waiting = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        names = [_frame_name(f) for f in frames]
        if _is_wait(names[-1]):
            waiting += count
            continue
        total += count
        own[names[-1]] += count
        for name in set(names):
            through[name] += count
        for pair in set(zip(names, names[1:])):
            edges[pair] += count
    if total == 0:
        return {"samples": waiting, "waiting": 1.0 if waiting else None}

    heaviest_child: dict[str, int] = {}
    for (parent, child), count in edges.items():
        if parent != child:
            heaviest_child[parent] = max(heaviest_child.get(parent, 0), count)

    def share(counter: Counter[str], skip_plumbing: bool) -> list[dict[str, Any]]:
        rows = []
        for name, count in counter.most_common():
            # A frame that only passes its samples on to one callee says nothing of its own.
            if skip_plumbing and (any(p in name for p in PLUMBING) or count >= 0.97 * total
                                  or heaviest_child.get(name, 0) >= 0.9 * count):
                continue
            rows.append({"frame": name, "share": round(count / total, 3)})
            if len(rows) == n:
                break
        return rows

    return {"samples": total + waiting, "cpu_samples": total, "waiting": round(waiting / (total + waiting), 3),
            "self": share(own, False), "inclusive": share(through, True)}

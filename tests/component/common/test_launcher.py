"""The one launcher's children that are not plain parts: a command (``start_command``, which
the bench runs ``imprint replay`` and its helpers as) and a part under a wrapper (a profiler's
``py-spy record … --``). Real processes, no broker: the stand-in child is
``tests.component.common.launcher_child``."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.launcher import LaunchError, Launcher
from services.common.processes import child_pids
from services.common.settings import Settings

CHILD = "tests.component.common.launcher_child"
WRAPPER = ["sh", "-c", '"$@"; echo "wrapper saw $?"', "sh"]
"""A wrapper like a profiler's: it runs the command as its child and writes once that ends."""


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    started = Launcher(Settings(state_dir=tmp_path, log_level="WARNING"), grace=5.0)
    yield started
    started.stop_all()


def test_a_command_is_reaped_with_its_exit_code_and_resource_usage(launcher: Launcher) -> None:
    child = launcher.start_command("tool", CHILD, ["0", "3"], discard_stdout=True)
    assert launcher.wait_exit("tool", timeout=30) == 3
    assert child.usage is not None and child.usage.ru_utime + child.usage.ru_stime > 0
    log = launcher.log("tool")
    assert "to stderr" in log and "to stdout" not in log, "stdout discarded, stderr logged"
    assert not (launcher.run_dir / "tool.pid").exists()


def test_waiting_for_the_parts_does_not_wait_for_a_command(launcher: Launcher) -> None:
    launcher.start_command("tool", CHILD, ["0", "0"])
    launcher.wait_exit("tool", timeout=30)
    launcher.wait_ready(timeout=1)  # a command that has ended is no part that failed to start
    with pytest.raises(LaunchError):
        launcher.wait_ready(["tool"], timeout=1)


def test_a_wrapped_child_is_stopped_through_its_target_so_the_wrapper_finishes(launcher: Launcher) -> None:
    child = launcher.start("journal", module=CHILD, args=["60", "0"], wrap=WRAPPER)
    deadline = time.monotonic() + 30
    while child.target_pid in (None, child.pid) or "to stderr" not in launcher.log("journal"):
        assert time.monotonic() < deadline, launcher.tail("journal")
        time.sleep(0.05)
    target = child.target_pid
    assert target is not None and target in child_pids(child.pid)
    assert launcher.stop("journal") == 0, "the wrapper ended on its own, not killed"
    log = launcher.log("journal")
    assert "terminated" in log and "wrapper saw 0" in log
    assert not _alive(target)


def test_a_killed_child_reports_the_kill(launcher: Launcher) -> None:
    child = launcher.start_command("tool", CHILD, ["60", "0"])
    assert launcher.kill("tool") == -signal.SIGKILL
    assert child.usage is not None and not (launcher.run_dir / "tool.pid").exists()
    assert launcher.exited() == [], "killed through the launcher, not exited on its own"


def test_a_killed_wrapped_child_leaves_neither_process(launcher: Launcher) -> None:
    child = launcher.start("journal", module=CHILD, args=["60", "0"], wrap=WRAPPER)
    deadline = time.monotonic() + 30
    while child.target_pid in (None, child.pid):
        assert time.monotonic() < deadline, launcher.tail("journal")
        time.sleep(0.05)
    target = child.target_pid
    assert launcher.kill("journal") == -signal.SIGKILL
    assert target is not None
    deadline = time.monotonic() + 10
    while _alive(target):  # orphaned to init, which reaps it
        assert time.monotonic() < deadline, f"the wrapped process {target} outlived the kill"
        time.sleep(0.05)


def test_a_command_restarts_the_same_way(launcher: Launcher) -> None:
    launcher.start_command("tool", CHILD, ["0", "4"], discard_stdout=True, env={"EXTRA": "1"})
    assert launcher.wait_exit("tool", timeout=30) == 4
    again = launcher.restart("tool")
    assert again.discard_stdout and again.env["EXTRA"] == "1" and again.part is None
    assert launcher.wait_exit("tool", timeout=30) == 4
    assert sys.executable == again.argv[0]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

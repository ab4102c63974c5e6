"""Exactly one relay of a log is active (issue 12.3): the file lock that elects it on
SQLite (one machine). The PostgreSQL advisory lock is proven in
``tests/integration/publication/test_publication_relay_election_pg.py`` and, with real
SIGKILLs, in ``tests/fault/test_fault_relay_failover.py``."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services.common.election import FileLockElection

HOLD = """
import sys, threading
from pathlib import Path
from services.common.election import FileLockElection
election = FileLockElection(Path(sys.argv[1]), retry_seconds=0.05)
assert election.campaign(threading.Event())
print("elected", flush=True)
sys.stdin.read()
"""


@pytest.mark.rule("P14")
def test_one_file_lock_holder_at_a_time_and_a_dead_holder_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "relay.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"elected"
        standby = FileLockElection(path, retry_seconds=0.05)
        gave_up = threading.Event()
        timer = threading.Timer(0.5, gave_up.set)
        timer.start()
        assert standby.campaign(gave_up) is False, "no second relay while the first holds the lock"
        assert not standby.still_leading()

        holder.kill()  # SIGKILL: the kernel releases the flock
        holder.wait()
        assert standby.campaign(threading.Event()) is True
        assert standby.still_leading()
        other = FileLockElection(path, retry_seconds=0.05)
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        assert other.campaign(stop) is False
        standby.resign()
        assert not standby.still_leading()
        assert other.campaign(threading.Event()) is True
        other.resign()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

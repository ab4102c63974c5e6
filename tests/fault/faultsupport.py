"""Helpers for the fault tier. Parts are started, crashed and killed through the one
launcher (:class:`tests.support.stack.Stack`, a :class:`services.common.launcher.Launcher`):
``stack.start(part)`` runs the real ``imprint serve <part>``; ``stack.start(part,
module="tests.fault.crash_relay", env=...)`` runs a crash wrapper (a module that arms a
SIGKILL at an exact point of the real code path, then runs the real serve);
``stack.kill(part)`` is a real SIGKILL and ``stack.wait_exit(part)`` awaits a self-kill."""

from __future__ import annotations

from tests.support.waiting import wait_until

__all__ = ["wait_until"]

"""The tests' one bounded wait: poll a condition until it holds or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str = "condition", timeout: float = 30, interval: float = 0.05) -> T:
    """Polls ``condition`` every ``interval`` seconds and returns its first truthy value;
    fails naming ``what`` once ``timeout`` seconds have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)

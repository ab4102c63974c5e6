"""In-process live notification: whoever called ``ViewStore.process()`` pokes the
notifier with the run ids that got frames; SSE handlers wait on it and then read
``frames_after`` from the store. The store stays the single source of frames, so the
live path and the resume path are the same code.

Versions make wake-ups loss-free: a handler reads ``version(run_id)`` *before* it
queries the store and then waits only if the version is still the same."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Notifier:
    def __init__(self) -> None:
        self._sequence = 0
        self._versions: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Remember the event loop, for :meth:`notify_threadsafe`."""
        self._loop = loop or asyncio.get_running_loop()

    @property
    def bound(self) -> bool:
        return self._loop is not None

    def version(self, run_id: str) -> int:
        return self._versions.get(run_id, 0)

    def notify(self, run_ids: Iterable[str]) -> None:
        """Call on the event loop's thread."""
        for run_id in run_ids:
            self._sequence += 1
            self._versions[run_id] = self._sequence
            for event in self._waiters.get(run_id, ()):
                event.set()
        if len(self._versions) > 50_000:  # forget quiet runs; a waiter just re-reads the store
            for run_id in [r for r in self._versions if r not in self._waiters][:25_000]:
                del self._versions[run_id]

    def notify_threadsafe(self, run_ids: Iterable[str]) -> None:
        """Call from a worker thread (e.g. right after ``process()`` in ``to_thread``)."""
        ids = list(run_ids)
        if self._loop is None or self._loop.is_closed():
            return  # nobody can be waiting on a loop that was never bound
        self._loop.call_soon_threadsafe(self.notify, ids)

    async def wait(self, run_id: str, seen: int, timeout: float) -> int:
        """Return once ``version(run_id) != seen`` or after ``timeout`` seconds."""
        if self.version(run_id) != seen:
            return self.version(run_id)
        event = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[run_id]
        return self.version(run_id)

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

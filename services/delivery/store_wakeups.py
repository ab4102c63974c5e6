"""Wake-ups from the other instances: their polls' changed runs, heard on the view tables'
channel, wake this process's feeds in its :class:`~services.delivery.notifier.Notifier`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.common.wakeups import ChannelListener
from services.delivery.notifier import Notifier


class StoreWakeups:
    """Wakes this process's feeds for the runs another instance's poll changed, heard on the
    view tables' channel (:class:`services.common.wakeups.ChannelListener`; the poll's
    transaction announces them, so a notification never precedes the frames it names).
    After a (re)connect every feed is woken: a notification sent while nobody listened is
    otherwise lost."""

    def __init__(self, listener: ChannelListener, origin: str, hub: Notifier) -> None:
        self.listener = listener
        self.origin = origin
        self.hub = hub
        self.received = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.listener.start(loop, self.heard, self.own)

    def stop(self) -> None:
        self.listener.stop()

    def own(self, payload: str) -> bool:
        """This process's own poll (its consumer already woke the feeds): dropped unheard."""
        try:
            return bool(json.loads(payload).get("origin") == self.origin)
        except (ValueError, AttributeError):
            return True  # not ours to read

    def heard(self, payload: str | None) -> None:
        if payload is None:
            self.hub.wake_all()
            return
        try:
            note: dict[str, Any] = json.loads(payload)
        except ValueError:
            return
        if not isinstance(note, dict) or note.get("origin") == self.origin:
            return
        runs = [r for r in note.get("runs", ()) if isinstance(r, str)]
        self.received += 1
        self.hub.notify(runs)

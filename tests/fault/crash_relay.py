"""``python -m tests.fault.crash_relay``: the real ``imprint serve publication-relay`` with a small
batch (``IMPRINT_TEST_RELAY_BATCH``) and, optionally, a pause after each batch
(``IMPRINT_TEST_RELAY_PAUSE`` seconds, so an outside SIGKILL lands mid-stream) and a
self-SIGKILL right after the N-th batch was acknowledged by Kafka, before its position
was recorded (``IMPRINT_TEST_KILL_AFTER_BATCHES``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from services.common import relay as relay_module

BATCH = int(os.environ.get("IMPRINT_TEST_RELAY_BATCH", "25"))
PAUSE = float(os.environ.get("IMPRINT_TEST_RELAY_PAUSE", "0"))
KILL_AFTER = int(os.environ.get("IMPRINT_TEST_KILL_AFTER_BATCHES", "0"))

_init = relay_module.Relay.__init__
_published = 0


def _small_batches(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    kwargs["batch_size"] = BATCH
    _init(self, *args, **kwargs)
    publish = self._outbox.publish_many

    async def publish_then_maybe_die(items):  # type: ignore[no-untyped-def]
        global _published
        await publish(items)
        _published += 1
        if KILL_AFTER and _published >= KILL_AFTER:
            print(f"fault: SIGKILL after batch {_published} was acknowledged, before its position was recorded",
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if PAUSE:
            await asyncio.sleep(PAUSE)

    self._outbox = type("PausingOutbox", (), {"publish_many": staticmethod(publish_then_maybe_die)})()


relay_module.Relay.__init__ = _small_batches  # type: ignore[method-assign]

if __name__ == "__main__":
    from services.cli import main

    sys.exit(main(["serve", "publication-relay"]))

"""``python -m tests.fault.crash_publication``: the real ``imprint serve publication``,
except that the process SIGKILLs itself right after the N-th tracked commit that settled
a candidate (``IMPRINT_TEST_KILL_AFTER_COMMITS``, default 1) — after PostgreSQL committed
the poll with its tracking record, before the consumer acknowledged the offsets to Kafka."""

from __future__ import annotations

import os
import signal
import sys

from services.publication import application

AFTER = int(os.environ.get("IMPRINT_TEST_KILL_AFTER_COMMITS", "1"))
_commit = application.PublicationLog._commit
_seen = 0


def _commit_then_die(self, ws, trackings, unit, emit):  # type: ignore[no-untyped-def]
    global _seen
    _commit(self, ws, trackings, unit, emit)
    if unit.settled:
        _seen += 1
        if _seen >= AFTER:
            through = ", ".join(f"{t.application_name}@{t.notification_id}" for t in trackings)
            print(f"fault: SIGKILL after the commit through {through}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


application.PublicationLog._commit = _commit_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    from services.cli import main

    sys.exit(main(["serve", "publication"]))

"""``python -m tests.fault.crash_publication``: the real ``imprint serve publication``,
except that the process SIGKILLs itself right after the N-th tracked commit that settled
a candidate (``IMPRINT_TEST_KILL_AFTER_COMMITS``, default 1) — after the database
committed the poll with its tracking records, before the consumer acknowledged the
offsets to Kafka."""

from __future__ import annotations

import os
import signal
import sys

from services.publication import application

AFTER = int(os.environ.get("IMPRINT_TEST_KILL_AFTER_COMMITS", "1"))
_after_commit = application.PublicationLog._after_commit
_seen = 0


def _committed_then_die(self, unit):  # type: ignore[no-untyped-def]
    global _seen
    _after_commit(self, unit)
    if unit.settled:
        _seen += 1
        if _seen >= AFTER:
            print(f"fault: SIGKILL after a commit that settled {len(unit.settled)} candidates", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


application.PublicationLog._after_commit = _committed_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    from services.cli import main

    sys.exit(main(["serve", "publication"]))

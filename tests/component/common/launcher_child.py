"""``python -m tests.component.common.launcher_child <seconds> <exit code>``: a stand-in child for
the launcher's tests. It writes one line to stdout and one to stderr, burns a little CPU
(so its resource usage shows some), then sleeps ``seconds`` and exits with ``exit code``;
SIGTERM ends it at once with code 0, after it logs ``terminated``."""

from __future__ import annotations

import signal
import sys
import time


def main(seconds: float, code: int) -> int:
    def terminated(*_: object) -> None:
        print("terminated", file=sys.stderr, flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, terminated)
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    busy = time.process_time() + 0.05
    while time.process_time() < busy:
        pass
    time.sleep(seconds)
    return code


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), int(sys.argv[2])))

"""Process logging: FastStream's per-poll service messages stay below WARNING, whatever
the order in which the process imports it (it sets its logger to INFO on import)."""

from __future__ import annotations

import subprocess
import sys


def test_faststream_logs_warnings_only_even_when_imported_after_configuration() -> None:
    script = (
        "import logging\n"
        "from services.common.observability import configure_logging\n"
        "configure_logging(level='INFO')\n"
        "import faststream.kafka\n"
        "print(logging.getLogger('faststream').getEffectiveLevel())\n"
    )
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == str(30)

"""The client half of the conformance kit (``imprint conformance client -- <adapter command…>``):
scripted runs played over real HTTP SSE to a client adapter that speaks JSON lines, the
client's view checked after every step against what Delivery's own rules make of the same
messages. :mod:`.script` (the run a case plays and the view it requires), :mod:`.cases`
(the cases), :mod:`.server` (the kit's SSE server), :mod:`.runner` (the adapter and the
checks)."""

from __future__ import annotations

from typing import Any

from services.conformance.client.runner import run_cases
from services.conformance.report import Report


def run(args: Any) -> Report:
    """``imprint conformance client -- <adapter command…>`` (:mod:`services.conformance.cli`)."""
    return run_cases(args.adapter, only=getattr(args, "only", None))

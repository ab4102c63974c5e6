"""The client half of the conformance kit (``imprint conformance client -- <adapter command…>``):
scripted runs played over real HTTP SSE to a client adapter that speaks JSON lines, the
client's view checked after every step against what Delivery's own rules make of the same
messages. :mod:`.script` (the run a case plays and the view it requires), :mod:`.cases`
(the cases), :mod:`.server` (the kit's SSE server), :mod:`.runner` (the adapter and the
checks)."""

from services.conformance.client.runner import run, run_cases

__all__ = ["run", "run_cases"]

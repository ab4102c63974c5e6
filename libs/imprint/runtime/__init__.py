"""imprint's runtime SDK: report one research run onto ``imprint.runtime.v1``.

* :class:`RunWriter` (:mod:`.writer`): typed, deterministic-id messages for one run, pure.
* :class:`Decisions` (:mod:`.decisions`): Publication's answers to this process's proposals.
* :class:`Heartbeats` (:mod:`.heartbeat`): ``run.heartbeat`` while a call is in flight (X10).
* :func:`run_scope` (:mod:`.stopping`): a run its user can stop — a stop request cancels it and
  ends it ``stopped`` (X11); :class:`StopRequests` is what an adapter feeds it.
* :mod:`.kafka`: the transport adapter (aiokafka idempotent producer; publication and control readers).
* :mod:`.pydantic_ai`: the ``send_answer_part`` tool for pydantic-ai agents (extra ``[agent]``).
"""

from imprint.runtime.decisions import Decisions
from imprint.runtime.heartbeat import Heartbeats
from imprint.runtime.memory import MemoryTransport
from imprint.runtime.stopping import RunScope, Stopped, StopRequests, run_scope
from imprint.runtime.writer import IdentityConflict, Proposal, Record, RunWriter, Transport, event_id_for

__all__ = ["Decisions", "Heartbeats", "IdentityConflict", "MemoryTransport", "Proposal", "Record", "RunScope",
           "RunWriter", "StopRequests", "Stopped", "Transport", "event_id_for", "run_scope"]

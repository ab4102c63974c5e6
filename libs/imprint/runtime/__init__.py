"""imprint's runtime SDK: report one research run onto ``imprint.runtime.v1``.

* :class:`RunWriter` (:mod:`.writer`): typed, deterministic-id messages for one run, pure.
* :class:`Decisions` (:mod:`.decisions`): Publication's answers to this process's proposals.
* :class:`Heartbeats` (:mod:`.heartbeat`): ``run.heartbeat`` while a call is in flight (X10).
* :mod:`.kafka`: the transport adapter (aiokafka idempotent producer; publication reader).
* :mod:`.pydantic_ai`: the ``send_answer_part`` tool for pydantic-ai agents (extra ``[agent]``).
"""

from imprint.runtime.decisions import Decisions
from imprint.runtime.heartbeat import Heartbeats
from imprint.runtime.memory import MemoryTransport
from imprint.runtime.writer import IdentityConflict, Proposal, Record, RunWriter, Transport, event_id_for

__all__ = ["Decisions", "Heartbeats", "IdentityConflict", "MemoryTransport", "Proposal", "Record", "RunWriter", "Transport",
           "event_id_for"]

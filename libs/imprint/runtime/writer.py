"""A typed writer for one run's reports on ``imprint.runtime.v1`` (pure: no I/O here).

:class:`RunWriter` builds each message with the v1 contract models
(:mod:`imprint.contracts.runtime`), validates the encoded bytes against the topic's
union in the contracts registry, and hands a :class:`Record` to a
:class:`Transport` (Kafka in production, :class:`~imprint.runtime.memory.MemoryTransport`
in tests). Every record is keyed by ``run_id``, so one run's reports stay in order
in one partition.

Deterministic ids: a message's ``event_id`` is a uuid5 of the run and the
message's identity within the run — ``run.admitted``, ``evidence.granted:<source>``,
``answer.text:<turn>:<segment>``, ``answer.part:<tool_call_id>``, … (see
:func:`event_id_for`). The writer keeps what it built per identity, so calling
the same method again with the same arguments (a retry after a send that raised,
when it is unknown whether the broker kept the first) re-sends the very same bytes,
``occurred_at`` included; consumers dedupe by ``event_id``. Reusing an identity for
different content is refused (:class:`IdentityConflict`): it would be a second
message under the first one's idempotency key.

Which lifecycle edges are legal (X2) is the journal's rule, not the writer's: an
illegal transition is sent and refused there, with a recorded reason.

X10: every message renews the run's lease at the Journal. The writer remembers when its
last send was acknowledged (:meth:`RunWriter.idle_for`), so
:class:`~imprint.runtime.heartbeat.Heartbeats` sends ``run.heartbeat`` only into silence.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol

from imprint.contracts.base import RunMessage, utcnow
from imprint.contracts.conversation import ConversationPolicy
from imprint.contracts.registry import decode, encode
from imprint.contracts.runtime import (
    AnswerPart,
    AnswerText,
    EvidenceGranted,
    EvidenceSet,
    NumericIssued,
    Outcome,
    QuestionConditionSet,
    RunAdmitted,
    RunCompleted,
    RunFailed,
    RunHeartbeat,
    RunQueued,
    RunRejected,
    RunStage,
    RunStarted,
    RunStopped,
    RunThrottled,
    Scope,
    ToolReceipt,
)
from imprint.contracts.topics import Topic
from imprint.publication.candidate import candidate_id_for, proposed_blocks
from imprint.runtime.turns import Turn, Turns

RUNTIME_EVENT_NAMESPACE = uuid.UUID("9a4c2e71-0b5d-5f3e-8c6a-4e7f1d2b3a90")
WAITING_HEARTBEAT_SECONDS = 30.0
"""X10/X12: silence after which a question waiting for its turn sends ``run.heartbeat`` (as the
heartbeats of a call in flight do, :data:`imprint.runtime.heartbeat.DEFAULT_EVERY`)."""
TOPIC = Topic.RUNTIME
"""Every message this writer builds belongs to the runtime union; the registry decodes it from this topic."""


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record, ready to send: contract topic (unprefixed), key, value, headers, and
    the ids a transport may put on the record's span (:mod:`imprint.runtime.tracecontext`)."""

    topic: Topic
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    ids: tuple[tuple[str, str], ...] = ()
    """``run_id``, ``event_id``, ``message_type`` and, for a proposal, ``candidate_id``: never text."""


class Transport(Protocol):
    async def send(self, record: Record) -> None:
        """Return once the broker has acknowledged ``record``; raise if that is not known."""


class IdentityConflict(ValueError):
    """A call reused a message identity of this run for different content."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """What an entry-A or entry-B call proposed: the message sent, the candidate id
    Publication will settle it under (P1) and how many blocks it carries (P6)."""

    message: AnswerText | AnswerPart
    candidate_id: str
    blocks: int


def event_id_for(run_id: str, identity: str) -> uuid.UUID:
    """The ``event_id`` of the message with ``identity`` in run ``run_id``."""
    return uuid.uuid5(RUNTIME_EVENT_NAMESPACE, f"{run_id}\x1f{identity}")


class RunWriter:
    """Writes one run's reports, in call order, through ``transport``.

    Concurrent calls (an agent's parallel tool calls) are sent one at a time, each after the
    previous one was acknowledged, so the partition holds them in call order. The writer keeps
    every record it built (for byte-identical retries): memory grows with the run, not beyond it.
    A writer lives in one process; a runtime that restarts mid-run and calls again gets the same
    ``event_id`` (a retry's ``occurred_at`` may then differ, the id does not).
    """

    def __init__(self, transport: Transport, run_id: str, *, clock: Callable[[], datetime] = utcnow,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.run_id = run_id
        self._transport = transport
        self._clock = clock
        self._monotonic = monotonic
        self._built: dict[str, tuple[RunMessage, Record]] = {}
        self._lock = asyncio.Lock()
        self._beats = 0
        self._last_sent: float | None = None
        self.turn: Turn | None = None
        """X12: the question's turn, once :meth:`start` waited for it (merged questions included)."""

    # -- lifecycle -----------------------------------------------------------------
    async def admit(self, *, account_id: str, conversation_id: str, message_id: str, question: str,
                    qcs: QuestionConditionSet | None = None, policy: ConversationPolicy | None = None) -> RunAdmitted:
        """X1: bind the run to the exact user message before anything runs. ``policy`` (X12): what the
        question does while another of its conversation runs or waits (none: the deployment's)."""
        qcs = qcs or QuestionConditionSet(qcs_id=f"qcs-{self.run_id}")
        return await self._write("run.admitted", RunAdmitted, account_id=account_id,
                                 conversation_id=conversation_id, message_id=message_id, question=question, qcs=qcs,
                                 policy=policy)

    async def queue(self) -> RunQueued:
        return await self._write("run.queued", RunQueued)

    async def start(self, *, turns: Turns | None = None, timeout: float | None = None,
                    heartbeat_seconds: float = WAITING_HEARTBEAT_SECONDS) -> RunStarted:
        """The run starts. With ``turns`` (X12): ``run.queued`` first (unless sent), then wait for the
        question's turn in its conversation (:meth:`Turns.wait`: a typed
        :class:`~imprint.runtime.turns.NotStarted` if the Journal ended it before; ``TimeoutError``
        after ``timeout`` seconds), then ``run.started``; the :class:`~imprint.runtime.turns.Turn`
        is :attr:`turn`. A question may wait behind a long answer: while it waits, a
        ``run.heartbeat`` goes out whenever the run was silent for ``heartbeat_seconds`` (X10: its
        lease stays renewed)."""
        if turns is not None:
            if "run.queued" not in self._built:
                await self.queue()
            self.turn = await self._wait_for_turn(turns, timeout, heartbeat_seconds)
        return await self._write("run.started", RunStarted)

    async def _wait_for_turn(self, turns: Turns, timeout: float | None, every: float) -> Turn:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            idle = self.idle_for() or 0.0
            wait = max(every - idle, 0.0)
            if deadline is not None:
                wait = min(wait, max(deadline - loop.time(), 0.0))
            try:
                return await turns.wait(self.run_id, wait)
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    raise
                if (self.idle_for() or 0.0) >= every:
                    await self.heartbeat()

    async def stage(self, stage: str, detail: str = "") -> RunStage:
        """Progress for the user; a stage is identified by its name and detail."""
        return await self._write(f"run.stage:{stage}:{detail}", RunStage, stage=stage, detail=detail)

    async def complete(self, outcome: Outcome, *, answer_text: str | None = None,
                       evidence: EvidenceSet | None = None) -> RunCompleted:
        return await self._write("run.completed", RunCompleted, outcome=outcome, answer_text=answer_text,
                                 evidence=evidence or EvidenceSet())

    async def stop(self, *, cancel_request_id: uuid.UUID | None = None) -> RunStopped:
        """The run ends ``stopped``; ``cancel_request_id``: the user's request it answers (X11)."""
        return await self._write("run.stopped", RunStopped, cancel_request_id=cancel_request_id)

    async def fail(self, reason: str) -> RunFailed:
        return await self._write("run.failed", RunFailed, reason=reason)

    async def throttle(self) -> RunThrottled:
        return await self._write("run.throttled", RunThrottled)

    async def reject(self, reason: str = "") -> RunRejected:
        return await self._write("run.rejected", RunRejected, reason=reason)

    # -- X10: the run's lease ---------------------------------------------------------
    async def heartbeat(self, in_flight: Literal["model", "tool"] | None = None) -> RunHeartbeat:
        """The runtime is alive and working on this run: renews its lease at the Journal.
        Each heartbeat is its own message (``run.heartbeat:<n>``, counted by this writer)."""
        self._beats += 1
        return await self._write(f"run.heartbeat:{self._beats}", RunHeartbeat, in_flight=in_flight)

    def idle_for(self) -> float | None:
        """Seconds since the broker acknowledged this writer's last message (``None``: none yet)."""
        return None if self._last_sent is None else self._monotonic() - self._last_sent

    # -- what the answer may stand on ---------------------------------------------------
    async def grant(self, source_id: str, *, scope: Scope, owner_account_id: str, title: str = "") -> EvidenceGranted:
        """P7: this run may cite ``source_id``."""
        return await self._write(f"evidence.granted:{source_id}", EvidenceGranted, source_id=source_id,
                                 scope=scope, owner_account_id=owner_account_id, title=title)

    async def issue_number(self, handle_id: str, value: Decimal | str | int, *, unit: str = "", version: int = 1,
                           source_id: str | None = None) -> NumericIssued:
        """P9: a Host-issued value the model renders through ``[[num:handle_id]]``."""
        return await self._write(f"numeric.issued:{handle_id}:{version}", NumericIssued, handle_id=handle_id,
                                 value=Decimal(str(value)), unit=unit, version=version, source_id=source_id)

    # -- the two entries (P1) ---------------------------------------------------------
    async def text(self, text: str, *, turn_id: str, segment: int = 0) -> Proposal:
        """Entry A: plain assistant text of model turn ``turn_id`` (``segment``: its position in the turn)."""
        candidate_id = candidate_id_for("text", turn_id, segment)
        message = await self._write(f"answer.text:{turn_id}:{segment}", AnswerText, candidate_id, turn_id=turn_id,
                                    segment=segment, text=text)
        return Proposal(message, candidate_id, 1)

    async def send_answer_part(self, arguments: Mapping[str, Any] | str, *, tool_call_id: str,
                               turn_id: str) -> Proposal:
        """Entry B: a closed ``send_answer_part`` call, arguments as the model gave them
        (an object, or its JSON text). Publication settles each block (P3, P6)."""
        payload: dict[str, Any] | str = arguments if isinstance(arguments, str) else dict(arguments)
        candidate_id = candidate_id_for("tool", tool_call_id)
        message = await self._write(f"answer.part:{tool_call_id}", AnswerPart, candidate_id, turn_id=turn_id,
                                    tool_call_id=tool_call_id, sealed=True, arguments=payload)
        return Proposal(message, candidate_id, _block_count(payload))

    async def tool_receipt(self, tool_call_id: str, status: Literal["ok", "failed", "unknown"] = "ok") -> ToolReceipt:
        """P19: the tool call's own settlement, separate from its publication effect."""
        return await self._write(f"tool.receipt:{tool_call_id}", ToolReceipt, tool_call_id=tool_call_id,
                                 status=status)

    # -- one path for every message ------------------------------------------------
    async def _write(self, identity: str, model: type[Any], candidate_id: str | None = None, /,
                     **fields: Any) -> Any:
        async with self._lock:
            message, record = self._build(identity, model, fields, candidate_id)
            await self._transport.send(record)
            self._last_sent = self._monotonic()
            return message

    def _build(self, identity: str, model: type[RunMessage], fields: dict[str, Any],
               candidate_id: str | None = None) -> tuple[RunMessage, Record]:
        message = model(run_id=self.run_id, event_id=event_id_for(self.run_id, identity), occurred_at=self._clock(),
                        **fields)
        earlier = self._built.get(identity)
        if earlier is not None:
            if _content(earlier[0]) != _content(message):
                raise IdentityConflict(f"{identity} of run {self.run_id} was already sent with other content")
            return earlier
        value = encode(message)
        decode(TOPIC, value)  # the topic's union must accept it, exactly as intake will read it
        ids = (("run_id", self.run_id), ("event_id", str(message.event_id)), ("message_type", message.type))
        if candidate_id is not None:
            ids += (("candidate_id", candidate_id),)
        record = Record(TOPIC, self.run_id.encode(), value, (("type", message.type.encode()),), ids)
        self._built[identity] = (message, record)
        return message, record


def _block_count(arguments: dict[str, Any] | str) -> int:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return 1  # Publication refuses it at intake (P3); nothing will be settled per block
    return len(proposed_blocks(arguments)) if isinstance(arguments, dict) else 1


def _content(message: RunMessage) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude={"occurred_at"})

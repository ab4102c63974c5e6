"""Publication's spans of one poll (X9: ids and fixed words, never text), made only when
tracing is on (:func:`services.common.tracing.active_tracer`); off, nothing here runs.

* ``publication decide``, per proposal (:data:`DECIDE`, opened by the one loop,
  :class:`services.common.dispatch.Dispatch`): a CONSUMER span under the context the proposal's
  record carried (the runtime's send), with its run, candidate, message type and the decision
  its handler returned (:attr:`imprint.publication.handling.Effects.decision`: what its blocks
  settled as, ``refused`` or ``settled_before``). Its previews are sent under it.
* ``publication commit``, per candidate the poll settled: from the end of the policy to the
  poll's outcome (``committed``, ``save_unknown``, ``save_failed``, ``redelivered``, or
  ``redone`` when the unit was redone after a lost race), under its decision. What the
  commit recorded is handed to the relay with it (:meth:`PollSpans.context_of`), and so are
  the failure facts of P15."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from imprint.contracts.base import Message
from imprint.contracts.topics import Topic
from imprint.publication.handling import CANDIDATE_TYPES, Effects
from imprint.runtime import tracecontext
from services.common import tracing
from services.common.dispatch import Handled, Spans
from services.common.unit_of_work import Conflict, Outcome, Recorded, Redelivered, Refused, Unconfirmed

if TYPE_CHECKING:  # annotations only: the log opened by the recovery tools never imports Kafka
    from services.common.kafka import Outgoing


def _proposal_ids(message: Any) -> dict[str, Any] | None:
    if message.type not in CANDIDATE_TYPES:
        return None
    return {"run_id": message.run_id, "message_type": message.type, "event_id": message.event_id,
            "tool_call_id": getattr(message, "tool_call_id", None), "turn_id": getattr(message, "turn_id", None)}


def _decided(effects: Effects) -> dict[str, Any]:
    return {"candidate_id": effects.settled[0].candidate_id if effects.settled else None,
            "decision": effects.decision}


DECIDE: Spans[Effects] = Spans("publication decide", _proposal_ids, _decided)
"""A span per proposal, read from its effects (never by reading its run again)."""


class PollSpans:
    """The commits of one poll (one :meth:`PublicationLog.process` call)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.commits: dict[str, Context] = {}
        """Candidate id → its commit's span."""
        self._open: list[Span] = []
        self._outcome: str | None = None

    # --- committing ----------------------------------------------------------------

    def committing(self, handled: Sequence[Handled[Effects]]) -> None:
        """The policy is done and the unit is about to commit: a span per settled candidate,
        under its decision. An earlier attempt of this poll lost its race: its commits never
        happened."""
        self._close("redone")
        for done in handled:
            parent = done.trace
            for settled in done.effects.settled:
                span = self.tracer.start_span("publication commit", context=parent or Context(), attributes=(
                    tracecontext.id_attributes({"run_id": settled.run_id, "candidate_id": settled.candidate_id})))
                self._open.append(span)
                self.commits[settled.candidate_id] = trace.set_span_in_context(span, parent)

    def context_of(self, event: Any) -> Context | None:
        """The commit an event recorded in this poll belongs to (the relay's hand-off)."""
        return self.commits.get(getattr(event, "candidate_id", None))  # type: ignore[arg-type]

    def facts(self, messages: Sequence[Message]) -> list[Outgoing]:
        """P15's failure facts, sent directly, each under its candidate's commit."""
        return [(Topic.PUBLICATION, message, self.context_of(message)) for message in messages]

    def settled(self, outcome: Outcome[Any]) -> None:
        """How the unit's commit ended (P15's words)."""
        match outcome:
            case Recorded():
                self._outcome = "committed"
            case Redelivered():
                self._outcome = "redelivered"
            case Conflict() | Refused():
                self._outcome = "save_failed"
            case Unconfirmed():
                self._outcome = "save_unknown"

    def end(self, error: BaseException | None = None) -> None:
        self._close(self._outcome, error)

    def _close(self, outcome: str | None, error: BaseException | None = None) -> None:
        for span in self._open:
            if outcome is not None:
                span.set_attributes(tracecontext.id_attributes({"outcome": outcome}))
            tracing.sent(span, error)
        self._open = []
        self.commits = {}


def poll_spans(tracer: trace.Tracer | None) -> AbstractContextManager[PollSpans | None]:
    """The spans of one poll (``None`` when tracing is off), ended with it."""
    return _OFF if tracer is None else _traced(tracer)


_OFF: AbstractContextManager[None] = nullcontext()


@contextmanager
def _traced(tracer: trace.Tracer) -> Iterator[PollSpans]:
    spans = PollSpans(tracer)
    try:
        yield spans
    except BaseException as error:
        spans.end(error)
        raise
    spans.end()


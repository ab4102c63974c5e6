"""Publication's spans of one poll (X9: ids and fixed words, never text), made only when
tracing is on (:func:`services.common.tracing.active_tracer`); off, the application takes its
plain path and nothing here runs.

* ``publication decide``, per proposal: a CONSUMER span under the context the proposal's
  record carried (the runtime's send), with its run, candidate, message type and decision —
  what its blocks settled as (``commit``, ``unchanged``, ``rejected``, ``revision_rejected``,
  joined with ``+`` when a candidate's blocks differ), ``refused`` (intake or answerability:
  P2, X1, X8, X10) or ``settled_before`` (a redelivered candidate). Its previews are sent
  under it (:meth:`PollSpans.previews`).
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
from imprint.publication import PublicationRun
from imprint.publication.handling import CANDIDATE_TYPES, Effects, Unit, apply_one
from imprint.publication.handling import Context as Offered
from imprint.publication.policy import Policy
from imprint.publication.settlement import Commit, Rejected, RevisionRejected, Unchanged
from imprint.runtime import tracecontext
from imprint.workspace import Workspace
from services.common import tracing
from services.common.inbound import Inbound
from services.common.unit_of_work import Committed, Conflict, Outcome, Redelivered, Refused, Unconfirmed

if TYPE_CHECKING:  # annotations only: the log opened by the recovery tools never imports Kafka
    from services.common.kafka import Outgoing

DECISIONS: dict[type, str] = {Commit: "commit", Unchanged: "unchanged", Rejected: "rejected",
                              RevisionRejected: "revision_rejected"}


class PollSpans:
    """The decisions and commits of one poll (one :meth:`PublicationLog.process` call)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.decisions: dict[str, Context] = {}
        """Candidate id → its decision's span, in the current attempt."""
        self.commits: dict[str, Context] = {}
        """Candidate id → its commit's span."""
        self._open: list[Span] = []
        self._outcome: str | None = None

    # --- deciding ------------------------------------------------------------------

    def decide(self, ws: Workspace, fresh: Sequence[Inbound], policy: Policy) -> Unit:
        """:func:`imprint.publication.handling.apply_all` over the poll, a span per proposal."""
        self._close("redone")  # an earlier attempt of this poll lost its race: its commit never happened
        self.decisions = {}
        unit = Unit()
        for item in fresh:
            offered = Offered(policy, item.size, shard=str(item.partition))
            if item.message.type in CANDIDATE_TYPES:
                unit.add(self._decide(ws, item, offered))
            else:
                unit.add(apply_one(ws, item.message, offered))
        return unit

    def _decide(self, ws: Workspace, item: Inbound, offered: Offered) -> Effects:
        message = item.message
        with tracing.handling(self.tracer, "publication decide", item, run_id=message.run_id,
                              message_type=message.type, event_id=message.event_id,
                              tool_call_id=getattr(message, "tool_call_id", None),
                              turn_id=getattr(message, "turn_id", None)) as span:
            refused = _refusals(ws, message.run_id)
            effects = apply_one(ws, message, offered)
            candidate_id = effects.settled[0].candidate_id if effects.settled else None
            if effects.then is not None:
                decision = "+".join(sorted({DECISIONS[type(d)] for d in effects.then.decisions})) or "none"
            else:
                decision = "refused" if _refusals(ws, message.run_id) > refused else "settled_before"
            span.set_attributes(tracecontext.id_attributes({"candidate_id": candidate_id, "decision": decision}))
            if candidate_id is not None:
                self.decisions[candidate_id] = trace.set_span_in_context(span)
        return effects

    def previews(self, unit: Unit) -> list[Outgoing]:
        """The unit's previews, each sent under its candidate's decision."""
        return [(Topic.PUBLICATION, preview, self.decisions.get(preview.block.candidate_id))
                for preview in unit.previews]

    # --- committing ----------------------------------------------------------------

    def committing(self, unit: Unit) -> None:
        """The policy is done and the unit is about to commit: a span per settled candidate."""
        for settled in unit.settled:
            parent = self.decisions.get(settled.candidate_id)
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
            case Committed():
                self._outcome = "committed"
            case Redelivered():
                self._outcome = "redelivered"
            case Conflict() | Refused():
                self._outcome = "save_failed"
            case Unconfirmed():
                self._outcome = "save_unknown"

    def end(self, error: BaseException | None = None) -> None:
        self._close(self._outcome, error)
        self.decisions, self.commits = {}, {}

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


def _refusals(ws: Workspace, run_id: str) -> int:
    run = ws.get(PublicationRun, PublicationRun.id_for(run_id))
    return 0 if run is None else run.refusals

"""The one loop every consumer runs over a poll: the :class:`~services.common.unit_of_work.Policy`
of the tracked unit of work, whatever the part.

Each part's pure handling module (``imprint.publication.handling``, ``imprint.journal.handling``,
``imprint.delivery.handling``) says what a message does, by its type, in one table, and
exposes the same three names::

    prepare(workspace, messages) -> messages   # once per attempt: look-ups, locks, the order
    handle(workspace, message, context) -> Effects
    HANDLERS: dict[type, Handler]               # Handler = (workspace, message, context) -> Effects

:class:`Dispatch` runs ``prepare``, then ``handle`` for each message in the order ``prepare``
gave, with the context the part makes of the message's record; with a tracer, a message its
:class:`Spans` names is handled inside a CONSUMER span under the context its record carried,
whose attributes are read from the effects the handler returned (X9: ids and fixed words).
What the unit then hands on (and whether it showed anything before its commit, P14) is the
part's to say, from the effects in order.

The part's handling module is passed in, never imported here: ``services.common`` is below
every part."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context as TraceContext

from imprint.runtime import tracecontext
from services.common import tracing
from services.common.inbound import Inbound

W = TypeVar("W")
C = TypeVar("C")
E = TypeVar("E")
R = TypeVar("R")


class Handling(Protocol[W, C, E]):
    """A part's handling module (``imprint.<part>.handling``), as :class:`Dispatch` reads it."""

    HANDLERS: Mapping[type, Callable[[W, Any, C], E]]

    def prepare(self, workspace: W, messages: Sequence[Any]) -> Sequence[Any]: ...

    def handle(self, workspace: W, message: Any, context: C) -> E: ...


@dataclass(frozen=True, slots=True)
class Handled(Generic[E]):
    """One message's effects, with the context of the span it was handled in (``None``:
    untraced) for whatever the part sends because of it."""

    effects: E
    trace: TraceContext | None = None


@dataclass(frozen=True, slots=True)
class Spans(Generic[E]):
    """Which messages a part handles in a span, named ``name``."""

    name: str
    ids: Callable[[Any], Mapping[str, Any] | None]
    """The ids a message's span carries from the start; ``None``: the message gets no span."""
    decided: Callable[[E], Mapping[str, Any]] = lambda effects: {}
    """The ids read from the effects once the message was handled (a decision, a frame id)."""


class Dispatch(Generic[W, C, E, R]):
    """A poll's messages through a part's handling: the policy of the tracked unit of work."""

    def __init__(
        self,
        handling: Handling[W, C, E],
        contexts: Callable[[Sequence[Inbound]], Callable[[Inbound], C]],
        gather: Callable[[W, list[Handled[E]]], R],
        *,
        shown: Callable[[R], bool] = lambda result: False,
        tracer: trace.Tracer | None = None,
        spans: Spans[E] | None = None,
    ) -> None:
        """``contexts``: called once per attempt with its messages, returns the context of
        each message (made when its span, if any, is current). ``gather``: what the unit hands
        on, from every message's effects, called before the commit (P14: previews go out
        there). ``shown``: whether that result showed anything outside the store."""
        self.handling = handling
        self.contexts = contexts
        self.gather = gather
        self._shown = shown
        self.tracer = tracer if spans is not None else None
        self.spans = spans

    def apply(self, workspace: W, fresh: Sequence[Inbound]) -> R:
        context_of = self.contexts(fresh)
        inbound = {id(item.message): item for item in fresh}
        handled: list[Handled[E]] = []
        ordered = self.handling.prepare(workspace, [item.message for item in fresh])
        workspace.load_wanted()
        for message in ordered:
            item = inbound[id(message)]
            ids = None if self.tracer is None else self.spans.ids(message)  # type: ignore[union-attr]
            if ids is None:
                handled.append(Handled(self.handling.handle(workspace, message, context_of(item))))
                continue
            with tracing.handling(self.tracer, self.spans.name, item, **ids) as span:  # type: ignore[arg-type,union-attr]
                effects = self.handling.handle(workspace, message, context_of(item))
                decided = self.spans.decided(effects)  # type: ignore[union-attr]
                if decided:
                    span.set_attributes(tracecontext.id_attributes(decided))
                handled.append(Handled(effects, trace.set_span_in_context(span)))
        return self.gather(workspace, handled)

    def shown(self, result: R) -> bool:
        return self._shown(result)

"""W3C trace context in Kafka headers, and spans that carry ids, never text (X9).

One proposal is one trace: the runtime SDK's send span is its root (or a child of whatever
span the runtime has open), its ``traceparent`` travels in the record's Kafka headers, and
each part that handles the message continues the trace from there.

This module uses the OpenTelemetry *API* only (pure: no exporter, no I/O). The application
chooses the SDK: without one configured every span here is a no-op, and a header is written
only when a valid context passes through (the API's no-op tracer keeps its parent's).

* :func:`inject` adds ``traceparent`` (and ``tracestate``) to a header list; :func:`extract`
  reads them back, or gives ``None`` when a record carries no valid context.
  :func:`traceparent` is a context's header value alone, for a store that keeps it beside
  what the span produced (Delivery's frames); ``extract([(TRACEPARENT, value)])`` reads it back.
* :func:`span` opens a span whose attributes are ids from :data:`ID_ATTRIBUTES` only, named
  ``imprint.<id>``. An exception marks the span as failed with its type name alone: the
  SDK's default would record ``str(exception)`` and its traceback, and a validation error's
  message quotes the input (a body).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_HEADERS = (TRACEPARENT, TRACESTATE)
_PROPAGATOR = TraceContextTextMapPropagator()

ID_ATTRIBUTES = frozenset({
    "run_id", "block_id", "candidate_id", "revision", "event_id", "message_type", "tool_call_id", "turn_id",
    "source_id", "frame_id", "decision", "outcome", "subscribers", "consumer",
})
"""What a span may say about a message: identities, positions, counts and the kind of
decision or outcome (a word from a fixed vocabulary), never a body, a question, a title, a
reason's free text or a provider envelope."""

MAX_ID_CHARS = 256
"""Ids are short; a longer value is cut so a trace stays bounded whatever a producer sent."""


def inject(headers: Sequence[tuple[str, bytes]], context: Context | None = None) -> list[tuple[str, bytes]]:
    """``headers`` plus the trace context of ``context`` (default: the current one), replacing
    any earlier ``traceparent``/``tracestate``. Nothing is added for an invalid context."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    kept = [(key, value) for key, value in headers if key not in _HEADERS]
    return kept + [(key, value.encode("ascii")) for key, value in carrier.items()]


def traceparent(context: Context | None = None) -> str | None:
    """The ``traceparent`` value of ``context`` (default: the current one), ``None`` for an invalid one."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier.get(TRACEPARENT)


def extract(headers: Sequence[tuple[str, bytes | str]] | None) -> Context | None:
    """The remote parent named by a record's ``traceparent`` header, or ``None`` (no header,
    or one that is not a valid W3C trace context)."""
    carrier: dict[str, str] | None = None
    for key, value in headers or ():
        if key in _HEADERS:
            carrier = carrier if carrier is not None else {}
            carrier[key] = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    if carrier is None or TRACEPARENT not in carrier:
        return None
    context = _PROPAGATOR.extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def id_attributes(ids: Mapping[str, Any]) -> dict[str, str | int | bool]:
    """``ids`` as span attributes (``imprint.<name>``); ``None`` values are left out. A name
    outside :data:`ID_ATTRIBUTES` is a programming error, refused before anything is exported."""
    unknown = ids.keys() - ID_ATTRIBUTES
    if unknown:
        raise ValueError(f"not an id a span may carry: {sorted(unknown)} (see ID_ATTRIBUTES)")
    attributes: dict[str, str | int | bool] = {}
    for name, value in ids.items():
        if value is None:
            continue
        if not isinstance(value, (int, bool)):
            value = str(value)[:MAX_ID_CHARS]
        attributes[f"imprint.{name}"] = value
    return attributes


@contextmanager
def span(tracer: trace.Tracer, name: str, *, kind: SpanKind = SpanKind.INTERNAL, context: Context | None = None,
         messaging: Mapping[str, str | int] | None = None, **ids: Any) -> Iterator[Span]:
    """A current span named ``name`` under ``context`` (default: the current context), with
    ``ids`` (see :func:`id_attributes`) and OpenTelemetry's ``messaging.*`` attributes."""
    attributes: dict[str, Any] = dict(messaging or {})
    attributes.update(id_attributes(ids))
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes,
                                      record_exception=False, set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as error:
            failed(current, error)
            raise


def failed(span: Span, error: BaseException) -> None:
    """Mark ``span`` failed with ``error``'s type name alone, never its message (a
    validation error's message quotes its input)."""
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))

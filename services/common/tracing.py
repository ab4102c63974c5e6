"""OpenTelemetry tracing for imprint's parts: off unless the standard environment turns it on.

Configuration is OpenTelemetry's own environment, read by its SDK, nothing of imprint's:

* ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set: spans are
  exported over OTLP/HTTP (protobuf) to it. ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``,
  ``none``, comma-separated) chooses otherwise; with neither, tracing stays off and every span
  is a no-op.
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` override the part's service name
  (``imprint-publication``, ``imprint-journal``, ``imprint-delivery``, …); ``OTEL_TRACES_SAMPLER``,
  ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS`` and the rest work as the SDK documents them.
  ``OTEL_SDK_DISABLED=true`` turns it all off.

:func:`configure_tracing` is called once, at a process's entry point (``services/cli.py``).

Propagation (one trace per proposal, SPEC X9: ids as attributes, never text) is
:mod:`imprint.runtime.tracecontext`, shared with the runtime SDK: the runtime's send span
puts ``traceparent`` in the record's headers; :func:`services.common.kafka.decode_records`
gives each :class:`~services.common.inbound.Inbound` the remote parent it names
(``Inbound.trace``); a part's span for that message opens under it with :func:`handling`;
the :class:`~services.common.kafka.Outbox` injects the context a caller hands it with a
message, so the next part continues the same trace (with a tracer, under a PRODUCER span of
its own per such message: :func:`sending`).

Off costs nothing: a part asks :func:`active_tracer` once, when it is built, and with
``None`` it makes no span, looks up no context and stores no ``traceparent``.

The spans of one proposal, part by part (each under the hop that handed it the message):

==============================  ====================================================
``send imprint.runtime.v1``     the runtime SDK (``imprint.runtime.kafka``)
``publication decide``          Publication's policy, per proposal (``services.publication.spans``)
``publication commit``          per settled candidate, around the poll's commit
``send imprint.publication.v1`` the relay's send of what the commit handed it (this Outbox);
                                a preview's send hangs under its decision
``journal apply``               the Journal's policy, per message
``delivery apply``              Delivery's policy, per message; its ``traceparent`` is stored
                                with the frames it appends
``delivery sse send``           per such frame, as a live feed hands it to its clients
==============================  ====================================================
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind

from imprint.contracts.base import Message
from imprint.runtime import tracecontext
from services.common.inbound import Inbound

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SUPPORTED_PROTOCOL = "http/protobuf"
"""The one OTLP protocol installed (``opentelemetry-exporter-otlp-proto-http``), the SDKs' default."""


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for: ``OTEL_TRACES_EXPORTER`` when set (``none``:
    no exporter), else ``otlp`` when an OTLP endpoint is set, else none at all (tracing off:
    OpenTelemetry's own default would export to localhost:4318 whether anything listens or not)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    configured = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if configured:
        names = [name.strip() for name in configured.split(",") if name.strip()]
        return [] if names == ["none"] else names
    return ["otlp"] if any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES) else []


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "otlp":
        protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or SUPPORTED_PROTOCOL).strip()
        if protocol != SUPPORTED_PROTOCOL:
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: only {SUPPORTED_PROTOCOL} is installed")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*
    if name == "console":
        return ConsoleSpanExporter()
    raise ValueError(f"OTEL_TRACES_EXPORTER={name}: not one of otlp, console, none")


_installed: TracerProvider | None = None
"""The provider :func:`configure_tracing` installed in this process (``None``: tracing is off)."""


def configure_tracing(service_name: str, *, install: bool = True) -> TracerProvider | None:
    """The SDK's tracer provider for this process, as the ``OTEL_*`` environment asks, or
    ``None`` when tracing is off. ``install`` makes it the global provider (once per process,
    OpenTelemetry refuses a second); a test keeps its own and hands it where spans are made.
    ``service_name`` is the default ``service.name``; ``OTEL_SERVICE_NAME`` wins over it."""
    environ = os.environ
    names = exporter_names(environ)
    if not names:
        return None
    exporters = [_exporter(name, environ) for name in names]
    resource = Resource.create({SERVICE_NAME: service_name}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)  # sampler and span limits from OTEL_TRACES_SAMPLER, OTEL_SPAN_*
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* apply
    if install:
        global _installed
        trace.set_tracer_provider(provider)
        _installed = provider
    return provider


def active_tracer(name: str) -> trace.Tracer | None:
    """The tracer ``name`` of the provider :func:`configure_tracing` installed, or ``None``
    when tracing is off: a part given ``None`` takes the path it takes without tracing."""
    return None if _installed is None else _installed.get_tracer(name)


def tracer(name: str, provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """A tracer of ``provider`` (default: the global one, a no-op until :func:`configure_tracing`)."""
    return trace.get_tracer(name, tracer_provider=provider)


@contextmanager
def handling(tracer_: trace.Tracer, name: str, inbound: Inbound, **ids: Any) -> Iterator[Span]:
    """The span of one part's handling of ``inbound``: a CONSUMER span under the context its
    record carried (a new trace when it carried none), with its topic, partition and offset
    and ``ids`` (``run_id``, ``block_id``, ``candidate_id``, …: ids only, see
    :data:`imprint.runtime.tracecontext.ID_ATTRIBUTES`)."""
    messaging = {"messaging.system": "kafka", "messaging.operation.type": "process",
                 "messaging.destination.name": inbound.topic,
                 "messaging.destination.partition.id": str(inbound.partition),
                 "messaging.kafka.offset": inbound.offset}
    parent = inbound.trace if inbound.trace is not None else Context()  # not whatever span is current
    with tracecontext.span(tracer_, name, kind=SpanKind.CONSUMER, context=parent, messaging=messaging,
                           **ids) as span:
        yield span


def sending(tracer_: trace.Tracer, topic: str, message: Message, parent: Context, client_id: str) -> Span:
    """A PRODUCER span for one message a producer (``client_id``: which outbox, e.g. the
    relay's) sends to ``topic``, under ``parent``; not made current (the caller ends it once
    the broker answered: :func:`sent`)."""
    attributes: dict[str, Any] = {"messaging.system": "kafka", "messaging.operation.type": "send",
                                  "messaging.destination.name": topic, "messaging.client.id": client_id}
    attributes.update(tracecontext.id_attributes(message.trace_ids()))
    return tracer_.start_span(f"send {topic}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes)


def sent(span: Span, error: BaseException | None = None) -> None:
    """End a span of :func:`sending` (or any span), failed with the error's type alone."""
    if error is not None:
        tracecontext.failed(span, error)
    span.end()

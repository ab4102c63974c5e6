"""W3C trace context in Kafka headers, and spans that carry ids only (X9: diagnostic traces
carry no question, answer or body). In memory: the spans go to the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from imprint.runtime import MemoryTransport, RunWriter, tracecontext

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def recording() -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_a_record_without_a_valid_traceparent_has_no_parent() -> None:
    assert tracecontext.extract(None) is None
    assert tracecontext.extract([("type", b"answer.part")]) is None
    assert tracecontext.extract([("traceparent", b"00-not-a-context")]) is None
    assert tracecontext.extract([("traceparent", b"\xff\xfe")]) is None


def test_the_context_a_header_names_is_the_one_injected_again() -> None:
    context = tracecontext.extract([("type", b"run.queued"), ("traceparent", PARENT.encode())])
    assert context is not None
    parent = trace.get_current_span(context).get_span_context()
    assert parent.is_remote and format(parent.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    headers = tracecontext.inject([("type", b"run.queued"), ("traceparent", b"00-stale")], context)
    assert headers == [("type", b"run.queued"), ("traceparent", PARENT.encode())]


def test_without_an_sdk_nothing_is_injected() -> None:
    with trace.NoOpTracer().start_as_current_span("nothing"):
        assert tracecontext.inject([("type", b"run.queued")]) == [("type", b"run.queued")]
    assert tracecontext.inject([("type", b"run.queued")], Context()) == [("type", b"run.queued")]


@pytest.mark.rule("X9")
def test_a_span_takes_ids_and_refuses_any_other_attribute() -> None:
    tracer, exporter = recording()
    with pytest.raises(ValueError, match="markdown"):
        with tracecontext.span(tracer, "x", run_id="run-1", markdown="the body"):
            pass
    with tracecontext.span(tracer, "y", run_id="run-1", block_id="blk-1", revision=2, candidate_id=None,
                           event_id="e" * 1000):
        pass
    [span] = exporter.get_finished_spans()
    assert dict(span.attributes or {}) == {"imprint.run_id": "run-1", "imprint.block_id": "blk-1",
                                           "imprint.revision": 2, "imprint.event_id": "e" * tracecontext.MAX_ID_CHARS}


@pytest.mark.rule("X9")
def test_a_failing_span_keeps_the_exception_type_and_not_its_message() -> None:
    tracer, exporter = recording()
    with pytest.raises(ValueError):
        with tracecontext.span(tracer, "decide", run_id="run-1"):
            raise ValueError("input_value='the private question'")
    [span] = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "ValueError"
    assert not span.events, "no exception event: its message and traceback would be exported"
    assert "private" not in span.to_json()


@pytest.mark.rule("X9")
def test_the_writers_records_name_their_ids_and_never_their_text() -> None:
    transport = MemoryTransport()
    writer = RunWriter(transport, "run-ids")

    async def play() -> None:
        await writer.admit(account_id="acct-1", conversation_id="conv-1", message_id="msg-1", question="Why secret?")
        await writer.send_answer_part({"markdown": "A secret block."}, tool_call_id="call-1", turn_id="turn-1")

    asyncio.run(play())
    admitted, part = transport.records
    assert dict(admitted.ids).keys() == {"run_id", "event_id", "message_type"}
    assert dict(part.ids) == {"run_id": "run-ids", "event_id": dict(part.ids)["event_id"],
                              "message_type": "answer.part", "candidate_id": "tool:call-1"}
    assert not any("secret" in value for record in (admitted, part) for _, value in record.ids)

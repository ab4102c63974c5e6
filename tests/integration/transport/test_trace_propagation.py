"""One trace per proposal, across Kafka, into a real OTLP receiver (X9: diagnostic traces
carry ids, never a question or a body).

The runtime SDK sends a proposal through its Kafka transport (its PRODUCER span's
``traceparent`` in the record's headers); a tracked subscriber, standing for Publication,
opens its span under the context the record carried and sends a preview through the Outbox
with that span's context; a second tracked subscriber, standing for Delivery, opens its span
under the preview's. Each side exports with its own SDK provider, configured by the standard
environment (``OTEL_EXPORTER_OTLP_ENDPOINT``), to the OpenTelemetry Collector built from its Go
modules (``deploy/local/otelcol.sh``); the test reads back what the collector received."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from opentelemetry import context as otel_context

from imprint.contracts.publication import AnswerPreview, BlockView, Content
from imprint.contracts.runtime import AnswerPart
from imprint.contracts.topics import Topic
from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaTransport
from services.common import tracing
from services.common.inbound import Inbound
from services.common.kafka import Outbox, make_broker
from services.common.subscription import subscribe_tracked
from services.common.settings import Settings
from tests.support.otel import Collector, ReceivedSpan

pytestmark = [pytest.mark.integration]

QUESTION = "private-question-7f3a: what did the board decide?"
BODY = "private-body-9c1e: the board decided to sell the northern plant."
PRODUCER, CONSUMER = 4, 5  # OTLP SpanKind


@pytest.mark.rule("X9")
def test_a_proposal_is_one_trace_from_the_runtime_through_two_hops_and_no_text_is_exported(
    isolated: Settings, otel_collector: Collector, monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, run_id = isolated, "run-trace-1"
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otel_collector.endpoint)
    providers = {part: tracing.configure_tracing(f"imprint-{part}", install=False)
                 for part in ("runtime", "publication", "delivery")}
    assert all(providers.values()), "an OTLP endpoint in the environment turns tracing on"
    publication = tracing.tracer("imprint.publication", providers["publication"])
    delivery = tracing.tracer("imprint.delivery", providers["delivery"])
    parents_seen: list[bool] = []

    async def scenario() -> str:
        framed = asyncio.Event()

        async def decide(inbound: list[Inbound]) -> None:
            for item in inbound:
                if not isinstance(item.message, AnswerPart):
                    continue
                candidate_id = f"tool:{item.message.tool_call_id}"
                parents_seen.append(item.trace is not None)
                with tracing.handling(publication, "publication decide", item, run_id=item.message.run_id,
                                      candidate_id=candidate_id, decision="preview"):
                    block = BlockView(block_id="blk-trace-1", revision=1, delivery_ordinal=1,
                                      candidate_id=candidate_id, content=Content(type="text", markdown=BODY),
                                      source_hint="sources_unverified",
                                      body_sha256=hashlib.sha256(BODY.encode()).hexdigest())
                    await outbox.publish(Topic.PUBLICATION, AnswerPreview(run_id=item.message.run_id, block=block),
                                         trace=otel_context.get_current())

        async def frame(inbound: list[Inbound]) -> None:
            for item in inbound:
                if isinstance(item.message, AnswerPreview):
                    block = item.message.block
                    with tracing.handling(delivery, "delivery frame", item, run_id=item.message.run_id,
                                          block_id=block.block_id, candidate_id=block.candidate_id, revision=1):
                        framed.set()

        broker = make_broker(s, "trace-test")
        outbox = Outbox(s, "trace-test")
        subscribe_tracked(broker, s, outbox, consumer="trace-publication", topics=[Topic.RUNTIME], handle=decide)
        subscribe_tracked(broker, s, outbox, consumer="trace-delivery", topics=[Topic.PUBLICATION], handle=frame)
        await outbox.start()
        await broker.start()
        try:
            async with KafkaTransport(s.kafka_bootstrap, topic_prefix=s.topic_prefix,
                                      tracer_provider=providers["runtime"]) as transport:
                writer = RunWriter(transport, run_id)
                await writer.admit(account_id="acct-trace", conversation_id="conv-trace", message_id="msg-trace",
                                   question=QUESTION)
                proposal = await writer.send_answer_part({"markdown": BODY}, tool_call_id="call-trace-1",
                                                         turn_id="turn-1")
            await asyncio.wait_for(framed.wait(), timeout=60)
            return proposal.candidate_id
        finally:
            await broker.stop()
            await outbox.stop()

    candidate_id = asyncio.run(scenario())
    for provider in providers.values():
        assert provider is not None
        provider.shutdown()  # flushes each part's batch to the collector

    def of_run(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [span for span in spans if span.attributes.get("imprint.run_id") == run_id]

    spans = of_run(otel_collector.wait_for(lambda received: len(of_run(received)) >= 4))
    by_name = {(span.service, span.attributes.get("imprint.message_type"), span.name): span for span in spans}
    assert parents_seen == [True], "the proposal's record carried a traceparent to the tracked consumer"

    admitted = by_name["imprint-runtime", "run.admitted", f"send {s.topic(Topic.RUNTIME)}"]
    send = by_name["imprint-runtime", "answer.part", f"send {s.topic(Topic.RUNTIME)}"]
    decide = by_name["imprint-publication", None, "publication decide"]
    frame = by_name["imprint-delivery", None, "delivery frame"]

    assert send.kind == PRODUCER and send.parent_span_id == "", "the runtime's send is the proposal's root"
    assert decide.kind == CONSUMER and frame.kind == CONSUMER
    assert decide.trace_id == send.trace_id == frame.trace_id, "one trace per proposal"
    assert decide.parent_span_id == send.span_id, "the consumer continues the producer's span"
    assert frame.parent_span_id == decide.span_id, "the outbox carried the decision's context on"
    assert admitted.trace_id != send.trace_id, "another message of the run is another trace"

    assert send.attributes["imprint.candidate_id"] == candidate_id == decide.attributes["imprint.candidate_id"]
    assert frame.attributes["imprint.block_id"] == "blk-trace-1"
    assert decide.attributes["messaging.destination.name"] == s.topic(Topic.RUNTIME)

    exported = "\n".join(otel_collector.lines())
    for private in (QUESTION, BODY, "private-question-7f3a", "private-body-9c1e"):
        assert private not in exported, "no question or body reaches the trace receiver (X9)"
    for span in spans:
        assert not any(isinstance(v, str) and ("private-" in v) for v in span.attributes.values())

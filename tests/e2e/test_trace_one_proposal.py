"""One proposal is one trace, from the runtime SDK's send to the SSE frame, in a real OTLP
receiver (X9: diagnostic traces carry ids, never a question or a body).

Every part runs as its own process (``tests/support/stack.py``) with tracing turned on by the
standard environment alone (``OTEL_EXPORTER_OTLP_ENDPOINT``), exporting to the OpenTelemetry
Collector built from its Go modules (``deploy/local/otelcol.sh``); the runtime is this test,
sending through the runtime SDK's Kafka transport; an SSE client follows the run. The test
reads back what the collector received and prints the proposal's trace as a tree."""

from __future__ import annotations

import asyncio
import threading

import pytest

from imprint.runtime import RunWriter
from imprint.runtime.kafka import KafkaTransport
from services.common import tracing
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.otel import Collector, ReceivedSpan
from tests.support.sse import SSE, read_stream
from tests.support.stack import Stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

QUESTION = "private-question-4b2d: which supplier did the audit flag?"
BODY = "private-body-8e51: the audit flagged the supplier in the eastern region."
PRODUCER, CONSUMER = 4, 5  # OTLP SpanKind
HOPS = [("send imprint.runtime.v1", "answer.part"), ("publication decide", "answer.part"),
        ("publication commit", None), ("send imprint.publication.v1", "answer.preview"),
        ("send imprint.publication.v1", "answer.published"), ("journal apply", "answer.published"),
        ("delivery apply", "answer.preview"), ("delivery apply", "answer.published")]
"""The spans of one proposal (name, message type), besides a ``delivery sse send`` per frame."""
OTEL_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER")


@pytest.mark.rule("X9")
def test_one_proposal_is_one_trace_from_the_runtime_send_to_the_sse_frame_and_no_text_is_exported(
    isolated: Settings, otel_collector: Collector, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """On each store backend: Delivery keeps each frame's ``traceparent`` in its store, and the
    ``delivery sse send`` span continues it from there."""
    # a keep-alive comment goes out only on a stream that follows its run's live feed: the
    # client's first one says it joined the feed (the backlog is behind it)
    s = isolated.model_copy(update={"sse_keepalive_seconds": 0.2})
    run_id, account = "run-trace-e2e", "acct-trace"
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otel_collector.endpoint)  # the parts inherit it
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # export within a moment, not every 5 s
    runtime = tracing.configure_tracing("imprint-runtime", install=False)
    assert runtime is not None
    token = mint_token(s, account)

    with Stack(s) as stack:
        asyncio.run(_send(s, runtime, run_id, account, propose=False))
        stack.wait_for_run(run_id, token)
        frames: list[SSE] = []
        comments: list[str] = []

        def published(seen: list[SSE]) -> bool:
            return any(frame.event == "answer-publication" for frame in seen)

        client = threading.Thread(target=lambda: frames.extend(read_stream(
            stack.base_url, run_id, token, until=published, timeout=90, comments=comments)[0]), daemon=True)
        client.start()
        # the SSE client reads the run, and follows its live feed, before the proposal is sent:
        # the ``delivery sse send`` span is the live feed's
        wait_until(lambda: comments, "the SSE client following the run's live feed", timeout=30)
        candidate_id = asyncio.run(_send(s, runtime, run_id, account, propose=True))
        client.join(90)
        assert any(frame.event == "answer-publication" for frame in frames), "the client read the committed block"
        runtime.shutdown()  # the runtime's spans leave; the parts export theirs every 200 ms

        def proposal_trace(received: list[ReceivedSpan]) -> list[ReceivedSpan]:
            roots = [span for span in received if span.service == "imprint-runtime"
                     and span.attributes.get("imprint.candidate_id") == candidate_id]
            return [span for span in received if roots and span.trace_id == roots[0].trace_id]

        def complete(received: list[ReceivedSpan]) -> bool:
            """Every hop arrived: each process exports on its own schedule, a child often first."""
            seen = [(span.name.replace(s.topic_prefix, ""), span.attributes.get("imprint.message_type"))
                    for span in proposal_trace(received)]
            return all(seen.count(hop) >= 1 for hop in HOPS) and seen.count(("delivery sse send", None)) >= 2

        spans = proposal_trace(otel_collector.wait_for(complete, timeout=60))

    with capsys.disabled():
        print(f"\none proposal's trace ({len(spans)} spans, trace {spans[0].trace_id}):\n{tree(spans, s.topic_prefix)}")

    by_id = {span.span_id: span for span in spans}

    def one(name: str, **attributes: object) -> ReceivedSpan:
        found = [span for span in spans if span.name == name
                 and all(span.attributes.get(key) == value for key, value in attributes.items())]
        assert len(found) == 1, (name, attributes, [(f.name, f.attributes) for f in found])
        return found[0]

    def child(span: ReceivedSpan, of: ReceivedSpan) -> bool:
        return span.parent_span_id == of.span_id

    published_topic = s.topic("imprint.publication.v1")
    send = one(f"send {s.topic('imprint.runtime.v1')}")
    decide = one("publication decide")
    commit = one("publication commit")
    preview_send = one(f"send {published_topic}", **{"imprint.message_type": "answer.preview"})
    relay_send = one(f"send {published_topic}", **{"imprint.message_type": "answer.published"})
    journal = one("journal apply", **{"imprint.message_type": "answer.published"})
    applied = one("delivery apply", **{"imprint.message_type": "answer.published"})
    preview_applied = one("delivery apply", **{"imprint.message_type": "answer.preview"})
    sse = one("delivery sse send", **{"imprint.frame_id": applied.attributes["imprint.frame_id"]})
    preview_sse = one("delivery sse send", **{"imprint.frame_id": preview_applied.attributes["imprint.frame_id"]})

    assert send.parent_span_id == "" and send.kind == PRODUCER, "the runtime's send is the proposal's root"
    assert child(decide, send) and decide.kind == CONSUMER, "Publication decides under the record's context"
    assert child(commit, decide), "the commit continues its decision"
    assert child(relay_send, commit) and relay_send.kind == PRODUCER, "the relay sends what the commit handed it"
    assert relay_send.attributes["messaging.client.id"] == "imprint-relay-publication"
    assert child(journal, relay_send) and child(applied, relay_send), "the Journal and Delivery consume the relay's send"
    assert child(sse, applied), "the SSE send continues the apply that wrote its frame (stored with the frame)"
    assert child(preview_send, decide) and child(preview_applied, preview_send) and child(preview_sse, preview_applied)
    assert len({span.trace_id for span in spans}) == 1 and all(
        span.parent_span_id in by_id for span in spans if span is not send), "ONE trace, every span under its root"

    assert {span.service for span in spans} == {"imprint-runtime", "imprint-publication", "imprint-journal",
                                                "imprint-delivery"}
    assert decide.attributes["imprint.decision"] == "commit"
    assert commit.attributes["imprint.outcome"] == "committed"
    block_id = relay_send.attributes["imprint.block_id"]
    for span in (decide, commit, relay_send, journal, applied, sse):
        assert span.attributes["imprint.run_id"] == run_id
    for span in (decide, commit, relay_send, applied):
        assert span.attributes["imprint.candidate_id"] == candidate_id
    assert applied.attributes["imprint.block_id"] == journal.attributes["imprint.block_id"] == block_id
    assert sse.attributes["imprint.subscribers"] >= 1

    exported = "\n".join(otel_collector.lines())
    for private in (QUESTION, BODY, "private-question-4b2d", "private-body-8e51", "eastern region"):
        assert private not in exported, "no question or body reaches the trace receiver (X9)"
    allowed = ("imprint.", "messaging.", "error.type")
    for span in otel_collector.spans():
        assert all(key.startswith(allowed) for key in span.attributes), span.attributes
        assert not span.raw.get("events"), "no exception or log text rides on a span"


async def _send(s: Settings, provider: object, run_id: str, account: str, *, propose: bool) -> str:
    """The runtime: the admission, or the proposal (its candidate id), through the runtime SDK."""
    async with KafkaTransport(s.kafka_bootstrap, topic_prefix=s.topic_prefix,
                              tracer_provider=provider) as transport:  # type: ignore[arg-type]
        writer = RunWriter(transport, run_id)
        if not propose:
            await writer.admit(account_id=account, conversation_id="conv-trace", message_id="msg-trace",
                               question=QUESTION)
            return run_id
        proposal = await writer.send_answer_part({"markdown": BODY}, tool_call_id="call-trace-e2e", turn_id="turn-1")
        return proposal.candidate_id


def tree(spans: list[ReceivedSpan], topic_prefix: str = "") -> str:
    """The spans as an indented tree: name, service, duration and the ids that tell the hops
    apart (the test's topic prefix left out of the names)."""
    children: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    shown = ("message_type", "decision", "outcome", "frame_id", "subscribers")
    lines: list[str] = []

    def describe(span: ReceivedSpan) -> str:
        took = (int(span.raw["endTimeUnixNano"]) - int(span.raw["startTimeUnixNano"])) / 1e6
        ids = " ".join(f"{key}={span.attributes[f'imprint.{key}']}" for key in shown
                       if f"imprint.{key}" in span.attributes)
        return f"{span.name.replace(topic_prefix, '')}  [{span.service}, {took:.1f} ms]  {ids}".rstrip()

    def walk(span: ReceivedSpan, depth: int) -> None:
        lines.append("  " * depth + describe(span))
        for below in sorted(children.get(span.span_id, []), key=lambda s: int(s.raw["startTimeUnixNano"])):
            walk(below, depth + 1)

    for root in children.get("", []):
        walk(root, 0)
    return "\n".join(lines)

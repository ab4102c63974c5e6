"""The spans each part makes for one proposal, in memory (the SDK's in-memory exporter; the
whole trace across the real processes and a real OTLP receiver is
``tests/e2e/test_trace_one_proposal.py``): what each span is a child of, the ids it carries
and never a body (X9), what is handed on so the next hop continues it — and, with tracing
off (no tracer), nothing of it at all."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from imprint.contracts.runtime import AnswerPart, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from imprint.delivery.frames import Frame
from imprint.publication.announcements import ANNOUNCED_TOPICS
from imprint.runtime import tracecontext
from services.common.inbound import Inbound
from services.common.handoff import Handoff
from services.common.settings import Settings
from services.delivery.notifier import Notifier
from services.delivery.view_store import ViewStore
from services.publication.application import open_log
from services.publication.relay import announce_publication
from tests.component.delivery.test_delivery_feed import FakeStore, settle
from tests.support.delivery_builders import preview, published, running
from tests.support.feeder import Feeder

BODY = "private-body-51c7: the plant closes in May."
RUN = "run-spans"


def recording() -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def remote_parent(tracer: trace.Tracer) -> tuple[Context, ReadableSpan | Any]:
    """The context a record's ``traceparent`` names: the runtime's send, ended."""
    send = tracer.start_span("runtime send", context=Context())
    send.end()
    return trace.set_span_in_context(send, Context()), send


def span_id(context: Context | None) -> int:
    assert context is not None
    return trace.get_current_span(context).get_span_context().span_id


def no_body(spans: Any) -> None:
    for span in spans:
        for value in (span.attributes or {}).values():
            assert "private-body" not in str(value), (span.name, span.attributes)


def _proposals(log: Any, parent: Context | None, emitted: list[Any]) -> None:
    admitted = RunAdmitted(run_id=RUN, account_id="acct", conversation_id="conv", message_id="m", question="q?",
                           qcs=QuestionConditionSet(qcs_id="qcs"))
    part = AnswerPart(run_id=RUN, turn_id="t1", tool_call_id="call-1", sealed=True, arguments={"markdown": BODY})
    unsealed = AnswerPart(run_id=RUN, turn_id="t1", tool_call_id="call-2", sealed=False, arguments={"markdown": BODY})
    topic = str(Topic.RUNTIME)
    log.process([Inbound(topic, 0, 0, admitted, size=100),
                 Inbound(topic, 0, 1, part, size=100, trace=parent),
                 Inbound(topic, 0, 2, unsealed, size=100, trace=parent)], emitted.extend)
    log.process([Inbound(topic, 0, 3, part, size=100, trace=parent)], emitted.extend)  # the same candidate again


@pytest.mark.rule("X9")
def test_publication_decides_each_proposal_and_commits_each_candidate_in_spans_it_hands_on(tmp_path: Path) -> None:
    tracer, exporter = recording()
    parent, send = remote_parent(tracer)
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        log.tracer = tracer
        log.handoff = handoff = Handoff(announce_publication, ANNOUNCED_TOPICS)
        handoff.open(lambda: None)
        emitted: list[Any] = []
        _proposals(log, parent, emitted)
        handed = handoff.take(0, 1000)
    finally:
        log.close()

    spans = exporter.get_finished_spans()
    decisions = [s for s in spans if s.name == "publication decide"]
    assert [s.attributes["imprint.decision"] for s in decisions] == ["commit", "refused", "settled_before"]
    assert all(s.parent is not None and s.parent.span_id == send.context.span_id for s in decisions), \
        "each decision continues the record's context"
    assert decisions[0].attributes["imprint.candidate_id"] == "tool:call-1"
    [commit] = [s for s in spans if s.name == "publication commit"]
    assert commit.parent is not None and commit.parent.span_id == decisions[0].context.span_id
    assert commit.attributes["imprint.outcome"] == "committed"

    [(_, shown, context)] = emitted
    assert shown.type == "answer.preview" and span_id(context) == decisions[0].context.span_id, \
        "the preview goes out under its decision"
    assert handed is not None
    announced = [item for _, items in handed for item in items]
    [committed] = [item for item in announced if item[1].type == "answer.published"]
    assert span_id(committed[2]) == commit.context.span_id, "the relay is handed the commit's context"
    assert all(len(item) == 2 for item in announced if item[1].type != "answer.published"), \
        "what no commit of a candidate recorded continues no trace"
    no_body(spans)


def test_publication_with_tracing_off_makes_no_span_and_hands_on_no_context(tmp_path: Path) -> None:
    tracer, exporter = recording()
    parent, _ = remote_parent(tracer)
    exporter.clear()
    log = open_log(Settings(state_dir=tmp_path, database_url=None))
    try:
        log.handoff = handoff = Handoff(announce_publication, ANNOUNCED_TOPICS)
        handoff.open(lambda: None)
        emitted: list[Any] = []
        _proposals(log, parent, emitted)
        handed = handoff.take(0, 1000)
    finally:
        log.close()
    assert exporter.get_finished_spans() == ()
    assert [len(item) for item in emitted] == [2]
    assert handed and all(len(item) == 2 for _, items in handed for item in items)


@pytest.mark.rule("X9")
@pytest.mark.rule("D1")
def test_delivery_applies_each_message_in_a_span_whose_traceparent_its_frames_keep(tmp_path: Path) -> None:
    tracer, exporter = recording()
    parent, send = remote_parent(tracer)
    settings = Settings(state_dir=tmp_path, database_url=None)
    feed = Feeder(lambda batch: batch)
    batch = feed.wrap(running(RUN), preview(RUN, "b1", 1, BODY), published(RUN, "b1", 1, BODY))
    batch[2] = dataclasses.replace(batch[2], trace=parent)
    writer = ViewStore(settings, tracer=tracer)
    try:
        writer.process(batch)
    finally:
        writer.close()

    applied = {s.attributes["imprint.message_type"]: s for s in exporter.get_finished_spans()
               if s.name == "delivery apply"}
    assert set(applied) == {"run.transitioned", "answer.preview", "answer.published"}
    publication = applied["answer.published"]
    assert publication.parent is not None and publication.parent.span_id == send.context.span_id
    assert applied["answer.preview"].parent is None, "a record that named no context starts a trace of its own"
    frame_id = publication.attributes["imprint.frame_id"]
    expected = tracecontext.traceparent(trace.set_span_in_context(trace.NonRecordingSpan(publication.context)))

    other = ViewStore(settings, tracer=tracer)  # another instance, reading the shared store
    untraced = ViewStore(settings)
    try:
        frames = {f.id: f for f in other.read_feeds({RUN: 0})[RUN].frames}
        assert frames[frame_id].trace == expected, "read back with the frame, by whichever instance sends it"
        assert all(f.trace is not None for f in frames.values()), "every frame of a traced poll names its apply"
        assert all(f.trace is None for f in untraced.read_feeds({RUN: 0})[RUN].frames), "off: not even read"
        assert untraced.frames_after(RUN, 0) == list(frames.values())
    finally:
        other.close()
        untraced.close()
    no_body(exporter.get_finished_spans())


def test_delivery_with_tracing_off_stores_no_traceparent(tmp_path: Path) -> None:
    tracer, exporter = recording()
    parent, _ = remote_parent(tracer)
    exporter.clear()
    settings = Settings(state_dir=tmp_path, database_url=None)
    batch = Feeder(lambda b: b).wrap(running(RUN), published(RUN, "b1", 1, BODY))
    store = ViewStore(settings)
    traced = ViewStore(settings, tracer=tracer)
    try:
        store.process([dataclasses.replace(item, trace=parent) for item in batch])
        assert all(f.trace is None for f in traced.read_feeds({RUN: 0})[RUN].frames)
    finally:
        store.close()
        traced.close()
    assert exporter.get_finished_spans() == ()


@pytest.mark.rule("X9")
async def test_a_feed_sends_each_traced_frame_in_one_span_whatever_the_number_of_clients() -> None:
    tracer, exporter = recording()
    parent, send = remote_parent(tracer)
    traceparent = tracecontext.traceparent(parent)
    store, hub = FakeStore(), Notifier(poll_interval=60, tracer=tracer)
    clients = [hub.subscribe(RUN, store, 0) for _ in range(50)]  # type: ignore[arg-type]
    await settle(lambda: store.reads >= 1 and not hub._due, "the first read")
    store.frames += [Frame(RUN, 1, "progress", {"stage": "s1"}, "h1", trace=traceparent),
                     Frame(RUN, 2, "progress", {"stage": "s2"}, "h2"),
                     Frame(RUN, 3, "answer-publication", {"body_sha256": "h3"}, "h3", trace=traceparent)]
    hub.notify([RUN])
    for client in clients:
        assert [f.id for f in await asyncio.wait_for(client.next(), 10)] == [1, 2, 3]
        client.close()
    await hub.close()
    sends = [s for s in exporter.get_finished_spans() if s.name == "delivery sse send"]
    assert [s.attributes["imprint.frame_id"] for s in sends] == [1, 3], "a frame that names no span starts none"
    assert all(s.attributes["imprint.subscribers"] == 50 for s in sends), "one span per frame, not per client"
    assert all(s.parent is not None and s.parent.span_id == send.context.span_id for s in sends)


@pytest.mark.rule("X9")
@pytest.mark.rule("D1")
async def test_a_frame_handed_over_is_sent_in_a_span_under_the_apply_that_appended_it(tmp_path: Path) -> None:
    tracer, exporter = recording()
    parent, _ = remote_parent(tracer)
    feed = Feeder(lambda batch: batch)
    store = ViewStore(Settings(state_dir=tmp_path, database_url=None), tracer=tracer)
    hub = Notifier(poll_interval=60, tracer=tracer)
    try:
        store.commit(feed.wrap(running(RUN)))
        client = hub.subscribe(RUN, store, 1)
        await settle(lambda: hub.feeds[RUN].reads == 1 and not hub._due, "the first read")
        batch = feed.wrap(published(RUN, "b1", 1, BODY))
        batch[0] = dataclasses.replace(batch[0], trace=parent)
        committed = store.commit(batch)
        hub.notify(committed.feeds, committed)
        frames = await asyncio.wait_for(client.next(), 10)
        assert hub.feeds[RUN].reads == 1, "handed over, not read back"
        client.close()
    finally:
        await hub.close()
        store.close()
    spans = exporter.get_finished_spans()
    [applied] = [s for s in spans if s.name == "delivery apply" and s.attributes["imprint.message_type"]
                 == "answer.published"]
    sends = [s for s in spans if s.name == "delivery sse send"]
    assert frames and [s.attributes["imprint.frame_id"] for s in sends] == [f.id for f in frames]
    assert all(s.parent is not None and s.parent.span_id == applied.context.span_id for s in sends)
    no_body(spans)

"""The poll recorder on PostgreSQL sends the stored events in binary: every byte of a
state comes back as it was written (sealed bodies are arbitrary bytes), and the
notification ids the library returns are the ones stored."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.persistence import InfrastructureFactory, StoredEvent, Tracking
from eventsourcing.utils import Environment

from services.common.eventstore import store_environment
from services.common.recorders import PostgresPollRecorder, tracking_many
from services.common.settings import Settings

pytestmark = pytest.mark.integration


@pytest.mark.rule("P15")
def test_binary_events_round_trip_every_byte_with_their_trackings(isolated: Settings) -> None:
    env = tracking_many(store_environment(isolated, "bytes"))
    factory = InfrastructureFactory.construct(Environment(name="bytes", env=env))
    try:
        recorder = factory.process_recorder()
        assert isinstance(recorder, PostgresPollRecorder)
        assert "unnest(%b::" in recorder.insert_events_statement.as_string(None)
        originator = uuid.uuid4()
        states = [bytes(range(256)), b"\\x00'\"{}\n" * 200, "текст 文本 ✓".encode()]
        events = [StoredEvent(originator_id=originator, originator_version=v, topic="t:e", state=s)
                  for v, s in enumerate(states, start=1)]
        ids = recorder.insert_events(events, trackings=[Tracking("topic#0", 7), Tracking("topic#1", 3)])
        assert [e.state for e in recorder.select_events(originator)] == states
        assert ids == [n.id for n in recorder.select_notifications(start=None, limit=10)]
        assert recorder.max_tracking_id("topic#0") == 7 and recorder.max_tracking_id("topic#1") == 3
    finally:
        factory.close()

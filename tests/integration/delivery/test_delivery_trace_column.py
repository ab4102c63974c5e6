"""A view store written before frames kept a ``traceparent`` gains the column in place when
opened, keeps every frame it holds (their ``traceparent`` unknown), and a traced poll then
stores one beside each frame it appends (X9: an id, never text). On each store backend."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider

from services.common.settings import Settings
from services.delivery.view_store import ViewStore
from tests.integration.delivery.test_delivery_store import Feed, earlier_store, settings  # noqa: F401 - fixture
from tests.support.delivery_builders import published, running

pytestmark = pytest.mark.integration
RUN = "run-column"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.rule("X9")
@pytest.mark.rule("D1")
def test_a_store_without_the_traceparent_column_gains_it_and_goes_on(settings: Settings) -> None:  # noqa: F811
    feed = Feed()
    store = ViewStore(settings)
    store.process(feed(running(RUN), published(RUN, "b1", 1, "First.")))
    before = [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0)]
    store.close()
    with earlier_store(settings) as write:  # the layout before this column
        write("ALTER TABLE delivery_frames DROP COLUMN traceparent", [()])

    tracer = TracerProvider().get_tracer("test")
    store = ViewStore(settings, tracer=tracer)
    try:
        with store.tables.transaction(commit=False) as c:
            assert "traceparent" in store.views.columns(c, "frames")
        assert [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0)] == before
        store.process(feed(published(RUN, "b2", 1, "Second.", ordinal=2)))
        frames = store.read_feeds({RUN: 0})[RUN].frames
        assert [f.id for f in frames] == [1, 2, 3]
        assert [f.trace is None for f in frames] == [True, True, False], "known only for what a traced poll wrote"
        assert frames[-1].trace is not None and frames[-1].trace.startswith("00-")
    finally:
        store.close()

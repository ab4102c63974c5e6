"""What a poll hands its own process's live feeds (``ViewStore.commit``) is what a read back
would have given them, on each store backend: the same frames, ids, text, SSE bytes and
``traceparent`` — also for frames the poll superseded, before or after it wrote them —
and nothing for a run whose stored frames the poll rewrote (a strip after the terminal, a
purge): its feeds read the store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from imprint.delivery.feeds import conversation_feed
from services.common.settings import Settings
from services.delivery.view_store import ViewStore
from tests.integration.delivery.test_delivery_store import Feed, each_backend, settings  # noqa: F401 - fixture
from tests.support.delivery_builders import closed, deleted, preview, published, running, settled, withdrawn

pytestmark = pytest.mark.integration
RUN, OTHER = "run-handed", "run-handed-2"


@pytest.fixture(params=[False, True], ids=["untraced", "traced"])
def store(settings: Settings, request: pytest.FixtureRequest) -> Iterator[ViewStore]:  # noqa: F811
    s = ViewStore(settings, tracer=TracerProvider().get_tracer("test") if request.param else None)
    yield s
    s.close()


def sent(frames: Any) -> list[tuple[Any, ...]]:
    """Everything a stream may use of a frame, its SSE bytes and ``traceparent`` included."""
    return [(f.run_id, f.id, f.event, f.data, f.body_sha256, f.text, f.trace, f.sse) for f in frames]


def commits_as_read_back(store: ViewStore, batch: Any, runs: tuple[str, ...] = (RUN,)) -> None:
    cursors = {run: (store.run(run).last_frame_id if store.run(run) else 0) for run in runs}  # type: ignore[union-attr]
    committed = store.commit(batch)
    reads = store.read_feeds(cursors)
    for run in runs:
        handed = committed.frames(run)
        assert handed is not None and handed, f"{run}: the poll's frames are handed over"
        assert sent(handed) == sent(reads[run].frames), f"{run}: handed over as read back"


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
@pytest.mark.rule("X9")
def test_a_poll_hands_over_the_frames_a_read_back_would_give(store: ViewStore) -> None:
    feed = Feed()
    # a preview superseded in the same poll: written as its skeleton
    commits_as_read_back(store, feed(running(RUN), preview(RUN, "b1", 1, "draft"), published(RUN, "b1", 1, "draft"),
                                     preview(RUN, "b2", 1, "next", ordinal=2)))
    # the stored preview superseded by a later poll; a conversation turn beside the frames
    commits_as_read_back(store, feed(published(RUN, "b2", 1, "next", ordinal=2), running(OTHER)), (RUN, OTHER))
    # two terminals in one poll: the first writes every pending frame, the second run's
    # status then supersedes a frame this poll had already written
    commits_as_read_back(store, feed(running(RUN, sequence=4), running(OTHER, sequence=4), settled(RUN),
                                     settled(OTHER), closed(OTHER, "other"), closed(RUN, "the end")), (RUN, OTHER))


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("X8")
@pytest.mark.rule("P21")
def test_a_poll_that_rewrote_stored_frames_hands_them_to_no_feed(store: ViewStore) -> None:
    feed = Feed()
    store.commit(feed(running(RUN, conversation="conv-h"), published(RUN, "b1", 1, "soon revoked"), settled(RUN),
                      closed(RUN, "t", conversation="conv-h")))
    stripped = store.commit(feed(withdrawn(RUN, "b1", 1)))
    assert stripped.frames(RUN) is None, "stripped after the terminal: a feed that reads it reads the store"
    assert store.commit(feed(running(OTHER, conversation="conv-x"))).frames(OTHER) is not None
    purged = store.commit(feed(published(OTHER, "b1", 1, "secret"), deleted(OTHER, "conv-x")))
    assert OTHER in purged.feeds and conversation_feed("conv-x") in purged.feeds
    assert purged.frames(OTHER) is None, "appended, then purged in the same poll: read back as purged"
    assert "secret" not in str(sent(store.read_feeds({OTHER: 0})[OTHER].frames))

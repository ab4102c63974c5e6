"""R1: a run read back from its stored events is the run the library's own projection makes
of them. The repositories fold stored events with ``project_events``
(``services.common.event_log.FoldingRepository``: the library's projector without its
per-event check against a runtime-checkable protocol)."""

from __future__ import annotations

import pytest
from eventsourcing.application import project_aggregate

from imprint.contracts.runtime import RunCompleted
from imprint.publication import PublicationRun
from imprint.shredding import InMemoryKeyring
from services.common.event_log import FoldingRepository
from services.publication.application import PublicationLog
from tests.integration.publication.pubsupport import admitted, part
from tests.support.backends import memory_environment
from tests.support.feeder import Feeder


@pytest.mark.rule("R1")
def test_a_run_read_back_is_what_the_librarys_projection_makes_of_its_events() -> None:
    log = PublicationLog(InMemoryKeyring(), env=memory_environment("publication"))
    try:
        assert isinstance(log.repository, FoldingRepository)
        feed = Feeder(lambda batch: log.process(batch, lambda _: None))
        feed.send(admitted("r1"), *(part("r1", f"c{i}", f"Finding {i}.") for i in range(3)),
                  RunCompleted(run_id="r1", outcome="answered"))
        run_id = PublicationRun.id_for("r1")
        read_back = log.repository.get(run_id)
        expected = log.repository.get(run_id, version=read_back.version, projector_func=project_aggregate)
        assert read_back is not expected and vars(read_back) == vars(expected)
        assert read_back.has_ended and len(read_back.live_blocks()) == 3
        assert read_back.version == len(list(log.events.get(run_id)))
    finally:
        log.close()

"""The Kafka fuzz tier on Publication's topics (runtime, sources, control): see ``barrage.py``.

Valid messages interleaved: a proposal of an admitted run (one committed block), a source's
registration, a run's lease lapse; each must leave its run or source with the events the
same message left on a reference before the barrage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest

from imprint.contracts.control import RunLeaseLapsed
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun
from imprint.publication.sources import SourceRecord
from services.common.settings import Settings
from services.publication.application import PublicationLog, open_log
from tests.integration.fuzz import seeds
from tests.integration.fuzz.barrage import ACCOUNT, BASE_RUN, Part, Plan, fuzz
from tests.integration.publication.pubsupport import admitted, part, registered

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(600)]


@contextmanager
def log(settings: Settings) -> Iterator[PublicationLog]:
    with closing(open_log(settings)) as app:
        yield app


def run_events(app: Any, m: Any) -> list[str]:
    return [type(e).__name__ for e in app.events.get(PublicationRun.id_for(m.run_id))]


def lapsed(run: str) -> RunLeaseLapsed:
    return RunLeaseLapsed(run_id=run, account_id=ACCOUNT, conversation_id=f"conv-{run}")


PUBLICATION = Part(
    "publication",
    [
        Plan(Topic.RUNTIME, seeds.runtime(), lambda n: [part(f"run-fz-v{i}", "c-v", "Valid block.") for i in range(n)],
             part("run-fz-vref", "c-v", "Valid block."), run_events,
             setup=lambda n: [admitted(f"run-fz-v{i}", ACCOUNT) for i in ["ref", *range(n)]]),
        Plan(Topic.SOURCES, seeds.sources(), lambda n: [registered(f"src-fz-v{i}") for i in range(n)],
             registered("src-fz-vref"),
             lambda app, m: [type(e).__name__ for e in app.events.get(SourceRecord.id_for(m.source_id))]),
        Plan(Topic.CONTROL, seeds.control(), lambda n: [lapsed(f"run-fz-l{i}") for i in range(n)],
             lapsed("run-fz-lref"), run_events,
             setup=lambda n: [admitted(f"run-fz-l{i}", ACCOUNT) for i in ["ref", *range(n)]]),
    ],
    base=[admitted(BASE_RUN, ACCOUNT), part(BASE_RUN, "base-1", "Committed before the barrage."),
          part(BASE_RUN, "base-2", "Second.")],
    reader=log,
    snapshot=lambda app: [(type(e).__name__, e.originator_version)
                          for e in app.events.get(PublicationRun.id_for(BASE_RUN))],
)


@pytest.mark.rule("P3")
@pytest.mark.rule("R8")
def test_every_hostile_record_on_publications_topics_ends_in_a_typed_outcome(
    isolated: Settings, fuzz_values: int, fuzz_seed: int, record_property: Any,
) -> None:
    record_property("fuzz", fuzz(PUBLICATION, isolated, fuzz_values, fuzz_seed))

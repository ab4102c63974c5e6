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
from imprint.publication import IntakeRefusal, PublicationRun, intake
from imprint.publication.handling import CANDIDATE_TYPES
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


def proposals(app: PublicationLog, topic: Topic, decoded: list[tuple[Any, int]]) -> list[str]:
    """A proposal's outcome in its run's log: its candidate settled, or refused with the reason
    intake gives (P2, P3) or the run gives (X1: never admitted, X10: lost…); another runtime
    message is applied by its type. A candidate id settled before (a copy of a proposal) is
    settled: nothing new is recorded for it. Other topics: applied by type."""
    runs: dict[str, tuple[Any, set[tuple[str | None, str]]]] = {}
    labels = []
    for message, size in decoded:
        if topic is not Topic.RUNTIME or message.type not in CANDIDATE_TYPES:
            labels.append(message.type)
            continue
        if message.run_id not in runs:
            run = app.run(message.run_id)
            refused = {(e.candidate_id, e.reason) for e in app.events.get(PublicationRun.id_for(message.run_id))
                       if type(e).__name__ == "CandidateRefused"}
            runs[message.run_id] = (run, refused)
        run, refused = runs[message.run_id]
        assert run is not None, f"run {message.run_id!r} of a decoded proposal is not in the log"
        result = intake(message, envelope_size=size)
        reasons = sorted(reason for candidate, reason in refused if candidate == result.candidate_id)
        if isinstance(result, IntakeRefusal):
            assert result.reason in reasons, f"{message.run_id}: the intake refusal {result.reason} is not recorded"
            labels.append(f"{message.type}:refused:{result.reason}")
        elif run.settled(result.candidate_id) is not None:
            labels.append(f"{message.type}:settled")
        else:
            assert reasons, f"{message.run_id}: candidate {result.candidate_id!r} neither settled nor refused"
            labels.append(f"{message.type}:refused:{reasons[0]}")
    return labels


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
    classify=proposals,
)


@pytest.mark.rule("P3")
@pytest.mark.rule("R8")
def test_every_hostile_record_on_publications_topics_ends_in_a_typed_outcome(
    isolated: Settings, fuzz_values: int, fuzz_seed: int, record_property: Any,
) -> None:
    record_property("fuzz", fuzz(PUBLICATION, isolated, fuzz_values, fuzz_seed))

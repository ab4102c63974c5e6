"""The Kafka fuzz tier on the Runtime journal's topics (runtime, publication, sources,
control): see ``barrage.py``. The journal leaves a record undecoded when its ``type`` header
names a type of the topic it does not act on (``APPLIED_TYPES``): counted as such.

Valid messages interleaved: a run's admission, a committed block of an admitted run, a
source's tombstone, a stop request for an admitted run; each must leave its execution or
source with the events the same message left on a reference before the barrage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest

from imprint.contracts.control import RunCancelRequested
from imprint.contracts.runtime import RunCompleted, RunStarted
from imprint.contracts.sources import SourceTombstoned
from imprint.contracts.topics import Topic
from imprint.journal import ids
from imprint.journal.handling import APPLIED_TYPES
from services.common.settings import Settings
from services.journal.application import RuntimeJournal
from tests.integration.fuzz import seeds
from tests.integration.fuzz.barrage import ACCOUNT, BASE_RUN, Part, Plan, fuzz
from tests.integration.publication.pubsupport import admitted
from tests.support import delivery_builders as view

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(600)]


@contextmanager
def journal(settings: Settings) -> Iterator[RuntimeJournal]:
    with closing(RuntimeJournal.from_settings(settings)) as app:
        yield app


def execution(app: Any, m: Any) -> list[str]:
    return [type(e).__name__ for e in app.events.get(ids.execution_id(m.run_id))]


JOURNAL = Part(
    "journal",
    [
        Plan(Topic.RUNTIME, seeds.runtime(), lambda n: [admitted(f"run-fz-v{i}", ACCOUNT) for i in range(n)],
             admitted("run-fz-vref", ACCOUNT), execution),
        Plan(Topic.PUBLICATION, seeds.publication(),
             lambda n: [view.published(f"run-fz-p{i}", "blk-v", 1, "Valid.") for i in range(n)],
             view.published("run-fz-pref", "blk-v", 1, "Valid."), execution,
             setup=lambda n: [admitted(f"run-fz-p{i}", ACCOUNT) for i in ["ref", *range(n)]]),
        Plan(Topic.SOURCES, seeds.sources(), lambda n: [SourceTombstoned(source_id=f"src-fz-v{i}") for i in range(n)],
             SourceTombstoned(source_id="src-fz-vref"),
             lambda app, m: [type(e).__name__ for e in app.events.get(ids.source_id(m.source_id))]),
        Plan(Topic.CONTROL, seeds.control(),
             lambda n: [RunCancelRequested(run_id=f"run-fz-c{i}", account_id=ACCOUNT) for i in range(n)],
             RunCancelRequested(run_id="run-fz-cref", account_id=ACCOUNT), execution,
             setup=lambda n: [admitted(f"run-fz-c{i}", ACCOUNT) for i in ["ref", *range(n)]]),
    ],
    base=[admitted(BASE_RUN, ACCOUNT), RunStarted(run_id=BASE_RUN), view.published(BASE_RUN, "blk-base", 1, "Base."),
          RunCompleted(run_id=BASE_RUN, outcome="answered", answer_text="The base answer.")],
    reader=journal,
    snapshot=lambda app: [(type(e).__name__, e.originator_version) for e in app.events.get(ids.execution_id(BASE_RUN))],
    applies=APPLIED_TYPES,
)


@pytest.mark.rule("P3")
@pytest.mark.rule("R8")
def test_every_hostile_record_on_the_journals_topics_ends_in_a_typed_outcome(
    isolated: Settings, fuzz_values: int, fuzz_seed: int, record_property: Any,
) -> None:
    # The valid runs' effect is compared after the barrage: no lease may lapse meanwhile (X10).
    settings = isolated.model_copy(update={"run_lease_seconds": 24 * 3600.0})
    record_property("fuzz", fuzz(JOURNAL, settings, fuzz_values, fuzz_seed))

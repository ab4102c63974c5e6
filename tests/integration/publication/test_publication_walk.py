"""The walk of one ``answer.part`` through Publication — its Kafka record decoded, the poll's
unit of work, its commit — listed as the passings of control between code defined in
``libs/`` and code defined in ``services/`` (a call or its return each), on each backend, for
a hot run (the usual case: a later block of a run in flight, citing the sources it was
granted and already relies on) and a cold one (the same after the application is reopened).

Hot, sixteen: the contract's decode, ``prepare`` and ``handle`` (six), then the commit (ten):
the run's key named (``key_name_for``), its one body sealed and its commit proven
(``FieldSealer.seal``, ``imprint.publication.proof.commit_proof``), each of which asks the
service's keyring for the key (``RecentKeys.key_for``). Cold, the unit also reads what
``prepare`` wanted from the log — each event folded by its own ``apply``, the stored body
opened — and ``handle`` asks for the run's reliance on each cited source, which a unit wants
only if the hot cache holds it (``imprint.publication.aggregates.reliance_read``). The lists
are exact: a new crossing fails with its place in the diff. ``docs/architecture.md``
("Handlers work on values") walks the same steps."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord

from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from imprint.publication import PublicationRun
from services.common.event_log import stored
from services.common.kafka import decode_records
from services.publication.application import open_log
from tests.integration.publication.pubsupport import admitted, granted, part
from tests.support.backends import Backend
from tests.support.feeder import Feeder
from tests.support.walks import crossed, crossings

pytestmark = pytest.mark.integration
RUN = "r-walk"


def there_and_back(name: str, *within: tuple[str, str]) -> list[tuple[str, str]]:
    """A call into ``name``, what crosses while it runs, and its return."""
    return [("call", name), *within, ("return", name)]


KEY = there_and_back("keys.py:RecentKeys.key_for")
DECODE = there_and_back("registry.py:decode_noting_unknown")
PREPARE = there_and_back("handling.py:prepare")
COMMIT = [*there_and_back("shredding.py:key_name_for"),
          *there_and_back("shredding.py:FieldSealer.seal", *KEY),
          *there_and_back("proof.py:commit_proof", *KEY)]
LOADED = [  # what prepare wanted, read from the log by the store (load_wanted)
    *there_and_back("run.py:PublicationRun.__init__"),
    *there_and_back("run.py:PublicationRun.Admitted.apply"),
    *there_and_back("run.py:PublicationRun.EvidenceGranted.apply"),
    *there_and_back("run.py:PublicationRun.EvidenceGranted.apply"),
    *there_and_back("shredding.py:FieldSealer.open", *KEY),
    *there_and_back("run.py:PublicationRun.BlockRevisionCommitted.apply"),
    *[*there_and_back("sources.py:SourceRecord.__init__"),
      *there_and_back("sources.py:SourceRecord.ShardOpened.apply")] * 2,
    *there_and_back("conversations.py:ConversationRuns.__init__"),
    *there_and_back("conversations.py:ConversationRuns.RunAdded.apply"),
]
RELIANCE_READ = there_and_back("event_log.py:StoredWorkspace.fetch",
                               *there_and_back("sources.py:SourceDependents.__init__"),
                               *there_and_back("sources.py:RelianceEvent.apply"))

HOT = [*DECODE, *PREPARE, *there_and_back("handling.py:handle"), *COMMIT]
COLD = [*DECODE, *PREPARE, *LOADED, *there_and_back("handling.py:handle", *RELIANCE_READ * 2), *COMMIT]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("cold", [False, True], ids=["hot", "cold"])
@pytest.mark.rule("P15")
def test_one_new_block_crosses_between_libs_and_services_sixteen_times_when_its_run_is_hot(
        backend: Backend, cold: bool) -> None:
    settings = backend.settings
    app = open_log(settings)
    try:
        feed = Feeder(lambda batch: app.process(batch, lambda _: None))
        feed.send(admitted(RUN), granted(RUN, "src-a"), granted(RUN, "src-b"),
                  part(RUN, "w-1", "Revenue grew 8% in 2024 [[cite:src-a]] [[cite:src-b]]."))
        if cold:  # a restarted instance: nothing of the run in memory
            app.close()
            app = open_log(settings)
        message = part(RUN, "w-2", "Margins held at 12% [[cite:src-a]], services led [[cite:src-b]].")
        raw = encode(message)
        offset = len(feed.history)  # the next on the runtime topic's partition, after the run's first four
        record = ConsumerRecord(settings.topic(Topic.RUNTIME), 0, offset, 0, 0, RUN.encode(), raw, None, len(RUN),
                                len(raw), [("type", message.type.encode())])

        def walk() -> None:
            inbound, refused = decode_records(settings, "publication", [record])
            app.process(inbound, lambda _: None)

        seen = crossings(walk)
        settled = stored(app, PublicationRun.id_for(RUN)).settled("tool:w-2")
        assert settled is not None and [b.kind for b in settled.blocks] == ["committed"]
        assert app.position(f"{settings.topic(Topic.RUNTIME)}#0") == offset, "committed with its position (P15)"
        assert crossed(seen) == (COLD if cold else HOT), seen
        assert len(HOT) == 16
    finally:
        app.close()

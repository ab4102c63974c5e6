"""``imprint inspect`` and Delivery's operator page: one run's timeline put together from its
four sources — the Publication log's ledger, the journal's facts, Delivery's frames (its store,
handed over as an argument: the operator tools never import Delivery) and what Kafka announced
(:data:`imprint.recovery.timeline.OBSERVED`: the announced types the inspector reads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from imprint.contracts.topics import Topic
from imprint.recovery import SentFrame, timeline
from imprint.recovery.timeline import STAGE_OF, observations_of
from services.common.settings import Settings
from services.publication.application import PublicationLog
from services.recovery.journal_reader import JournalReader
from services.recovery.log_reader import read_ledger
from services.recovery.observations import Observations, observe

INSPECT_TYPES = frozenset(STAGE_OF)
"""The announced message types a timeline reads: those with a row in its table."""
INSPECT_TOPICS = (Topic.RUNTIME, Topic.PUBLICATION, Topic.DELIVERY)


class DeliveredFrames(Protocol):
    """What the inspector reads of Delivery's store: a run's frames after a position, and its
    report of who saw each withdrawn block revision (D7)."""

    def frames_after(self, run_id: str, last_id: int, limit: int = 1000) -> list[Any]: ...

    def seen(self, run_id: str) -> Mapping[str, Any] | None: ...

    def close(self) -> None: ...


def frames_of(store: DeliveredFrames, run_id: str) -> list[SentFrame]:
    """The frames Delivery wrote for the run (ids, events, block revisions; no bodies)."""
    frames: list[SentFrame] = []
    last = 0
    while True:
        page = store.frames_after(run_id, last, limit=1000)
        for f in page:
            data = f.data if isinstance(f.data, dict) else {}
            frames.append(SentFrame(f.id, f.event, data.get("block_id"), data.get("revision"), data.get("status")))
        if len(page) < 1000:
            return frames
        last = page[-1].id


def assemble_timeline(app: PublicationLog, run_id: str, *, store: DeliveredFrames | None, observed: Observations,
                      journal: JournalReader) -> dict[str, Any]:
    """The inspector's document: the log's ledger, Delivery's frames (``store``), Kafka's
    announcements and the journal's facts, put side by side by :func:`imprint.recovery.timeline`."""
    ledger = read_ledger(app, run_id)
    frames: list[SentFrame] | None = None
    seen: Mapping[str, Any] | None = None
    if store is not None:
        frames = frames_of(store, run_id)
        seen = store.seen(run_id)
    return timeline(run_id, ledger, journal=journal.run(run_id), journal_note=journal.reason, frames=frames,
                    observations=observations_of(observed.messages) if observed.available else None,
                    observations_note=observed.reason, seen_report=seen)


async def observe_run(settings: Settings, run_id: str) -> Observations:
    return await observe(settings, run_id, INSPECT_TOPICS, INSPECT_TYPES)

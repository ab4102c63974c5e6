"""X7 — redaction by appended event, serialized with completion.

A ``source.tombstoned`` appends ``EvidenceRedacted(source_id)`` to every execution
whose evidence includes the source. History then hides that source's excerpts
but keeps every identity: the evidence set, the ordered items (source ids,
titles), the snapshot id and the knowledge_version. The frozen completion record
itself is never rewritten.

Serialization. One ``SourceLinks`` aggregate per source (the journal's; Publication's
``SourceStanding`` is the value object citation checks read) remembers which
executions have seen it (linked at ``evidence.granted`` and at completion) and
whether it is tombstoned:

* tombstone: append ``Tombstoned`` to the source and ``EvidenceRedacted`` to every
  linked execution — in one transaction;
* completion (or grant) of an execution that cites the source: link it (if not
  linked yet) and, if the source is already tombstoned, append
  ``EvidenceRedacted`` right after ``Completed`` — in one transaction.

A tombstone racing a completion writes the same aggregates (the source, or the
execution when it was linked at grant time), so the event store's optimistic
concurrency lets exactly one commit first and makes the other retry against the
new state. Whichever order wins, a source withdrawn during generation ends up
redacted in the completed execution.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eventsourcing.domain import Aggregate
from eventsourcing.utils import register_topic

from imprint.ids import FoundByKey
from imprint.journal import ids
from imprint.journal.events import MessageEvent


class SourceLinks(FoundByKey, Aggregate, key=ids.source_id, by=("source_id",)):
    class_version = 1

    class Noted(Aggregate.Created):
        class_version = 1
        source_id: str

    class Linked(Aggregate.Event):
        class_version = 1
        run_id: str

        def apply(self, s: SourceLinks) -> None:
            s.run_ids.append(self.run_id)

    class Tombstoned(MessageEvent):
        class_version = 1

        def change(self, s: SourceLinks) -> None:
            s.tombstoned_at = self.timestamp

    def __init__(self, source_id: str) -> None:
        self.source_id = source_id
        self.run_ids: list[str] = []
        self.tombstoned_at = None
        self.processed: set[str] = set()

    @property
    def tombstoned(self) -> bool:
        return self.tombstoned_at is not None

    def link(self, run_id: str) -> None:
        if run_id not in self.run_ids:
            self.trigger_event(self.Linked, run_id=run_id)

    def tombstone(self, event_id: str) -> bool:
        """Append the tombstone once. Returns whether it was new."""
        if self.tombstoned or event_id in self.processed:
            return False
        self.trigger_event(self.Tombstoned, event_id=event_id)
        return True


@dataclass(frozen=True)
class EvidenceView:
    """One evidence item as history may show it."""

    source_id: str
    title: str
    excerpt: str | None
    redacted: bool


def redact_items(items: Iterable[tuple[str, str, str | None]], redacted_sources: frozenset[str] | set[str]) -> list[EvidenceView]:
    """Hide the excerpt of every item whose source is redacted; keep order, ids and titles."""
    out: list[EvidenceView] = []
    for source_id, title, excerpt in items:
        hidden = source_id in redacted_sources
        out.append(EvidenceView(source_id=source_id, title=title, excerpt=None if hidden else excerpt, redacted=hidden))
    return out


register_topic("imprint.journal.redaction:SourceStanding", SourceLinks)
"""Logs written before the rename name the aggregate by its old topic; they still read."""

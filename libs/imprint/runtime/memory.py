"""An in-memory :class:`~imprint.runtime.writer.Transport`: records what would go to Kafka,
partitioned by key as Kafka would keep it. For tests of the SDK and of agents built on it."""

from __future__ import annotations

from collections import defaultdict

from imprint.runtime.writer import Record


class MemoryTransport:
    def __init__(self, *, fail_next: int = 0) -> None:
        self.records: list[Record] = []
        self.fail_next = fail_next
        """How many of the next sends raise ``ConnectionError`` after keeping the record
        (a send whose acknowledgement was lost: the broker has it, the caller does not know)."""

    async def send(self, record: Record) -> None:
        self.records.append(record)
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("acknowledgement lost")

    def by_key(self) -> dict[bytes, list[Record]]:
        """Each key's records in the order they were sent: what one partition holds for it."""
        keyed: dict[bytes, list[Record]] = defaultdict(list)
        for record in self.records:
            keyed[record.key].append(record)
        return dict(keyed)

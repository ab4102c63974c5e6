"""The one feeder of the tests: it plays the Kafka consumer for a store under test
(``RuntimeJournal.process``, ``PublicationLog.process``, ``ViewStore.process``), handing
it contract messages as :class:`~services.common.inbound.Inbound` records with the
positions, sizes and envelopes a real poll would carry.

    feed = Feeder(journal.process)
    batch = feed.wrap(admitted("r1"))           # records only (offsets 0, 1, … per topic partition)
    feed.send(admitted("r1"), completed("r1"))  # one poll: what ``process`` returns
    feed.replay(feed.history)                   # the same records again (a redelivery)

``topic_of`` says which topic a message arrives on (default: the contract's one
type → topic map, ``imprint.contracts.registry.topic_of``); ``resume(topic, partition)`` gives the first offset, for a store that already recorded
some (default 0)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from imprint.contracts.registry import encode, topic_of
from services.common.inbound import Inbound

R = TypeVar("R")


class Feeder(Generic[R]):
    def __init__(self, process: Callable[[list[Inbound]], R], topic_of: Callable[[Any], str] = topic_of, *,
                 resume: Callable[[str, int], int] | None = None) -> None:
        self.process = process
        self.topic_of = topic_of
        self.resume = resume
        self.offsets: dict[tuple[str, int], int] = {}
        self.history: list[Inbound] = []
        """Every record handed over by :meth:`send`, in order."""

    def inbound(self, message: Any, topic: str | None = None, partition: int = 0) -> Inbound:
        name = str(topic or self.topic_of(message))
        position = (name, partition)
        if position not in self.offsets:
            self.offsets[position] = self.resume(name, partition) if self.resume else 0
        offset = self.offsets[position]
        self.offsets[position] += 1
        raw = encode(message)
        return Inbound(name, partition, offset, message, size=len(raw), raw=raw, key=_key(message))

    def wrap(self, *messages: Any, topic: str | None = None, partition: int = 0) -> list[Inbound]:
        return [self.inbound(m, topic=topic, partition=partition) for m in messages]

    def send(self, *messages: Any, topic: str | None = None, partition: int = 0) -> R:
        """Hand ``messages`` over as one poll; what ``process`` returned."""
        batch = self.wrap(*messages, topic=topic, partition=partition)
        self.history.extend(batch)
        return self.process(batch)

    def replay(self, batch: list[Inbound]) -> R:
        """Hand already-delivered records over again (a redelivery after a rewind or restart)."""
        return self.process(batch)


def _key(message: Any) -> bytes | None:
    key = getattr(message, "key", None)
    return key.encode() if isinstance(key, str) else None

"""D7: a conversation's notices as a live feed — read the way a run's frames are read, so
the one live-feed hub (:mod:`services.delivery.notifier`) and the one streaming response
(:class:`services.delivery.stream.EventStream`) serve them unchanged.

A notice is born in the poll that strips a withdrawn block after its run's ``done``
(:mod:`imprint.delivery.projection`), numbered per conversation and written in that poll's
transaction, which names the conversation's feed (:func:`~services.delivery.view_tables.notice_feed`)
among the feeds it changed: the instance that applied it wakes its followers at once, every
other instance hears it on the store's channel. A client follows from the last notice it
holds (``Last-Event-ID``); notices are never deleted, so every id up to the conversation's
last continues without a gap, and an id beyond it starts over (D8's ``reset``).

A notices stream never ends by itself (a conversation may be told something at any time);
it ends when the conversation is deleted (X8). The conversation stream (D9: its turns and a
copy of each notice, :mod:`imprint.delivery.conversation`) is a feed of the same kind, read
here over its own table (:data:`ENTRIES`). Synchronous: call from a worker thread."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imprint.delivery.feeds import conversation_feed, conversation_of, notice_feed
from imprint.delivery.frames import Frame
from imprint.delivery.notices import NOTICE_EVENT
from services.delivery.notifier import FeedRead
from services.delivery.sse import read_back
from services.delivery.view_tables import ViewTables


@dataclass(frozen=True)
class NoticesHead:
    """Where a conversation's notices (or its stream) stand (the fields a stream asks a run for)."""

    last_frame_id: int
    deleted: bool
    terminal: bool = False
    """A conversation's feed has no terminal: it is followed until the client leaves."""


@dataclass(frozen=True)
class FeedKind:
    """One kind of a conversation's feed: how its key is made, its rows read and its head column."""

    key: Callable[[str], str]
    rows: Callable[[ViewTables, Any, Mapping[str, int], int], list[Any]]
    head: str
    number: str
    event: Callable[[Any], str]


NOTICES = FeedKind(notice_feed, ViewTables.notices_after, "last_notice_id", "notice_id", lambda row: NOTICE_EVENT)
"""D7: a conversation's notices (every frame an ``event: notice``)."""
ENTRIES = FeedKind(conversation_feed, ViewTables.entries_after, "last_entry_id", "entry_id",
                   lambda row: str(row["event"]))
"""D9: a conversation's stream (turns and notices, :mod:`imprint.delivery.conversation`)."""


class NoticeFeeds:
    """One kind of feed of every conversation, keyed by its feed key (``notice_feed(conversation)``,
    or ``conversation_feed(conversation)`` for :data:`ENTRIES`)."""

    def __init__(self, views: ViewTables, kind: FeedKind = NOTICES) -> None:
        self.views = views
        self.tables = views.tables
        self.kind = kind

    def frames_after(self, feed: str, last_id: int, limit: int = 1000) -> list[Frame]:
        with self.tables.reading() as c:
            rows = self.kind.rows(self.views, c, {_conversation(feed): int(last_id)}, int(limit))
        return [self._frame(feed, row) for row in rows]

    def run(self, feed: str) -> NoticesHead:
        """Where the conversation's feed stands (a conversation never told anything has none yet)."""
        head = self.heads([feed]).get(feed, (0, False))
        return NoticesHead(last_frame_id=head[0], deleted=head[1])

    def read_feeds(self, cursors: Mapping[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        conversations = {_conversation(feed): feed for feed in cursors}
        frames: dict[str, list[Frame]] = {feed: [] for feed in cursors}
        with self.tables.reading() as c:
            for row in self.kind.rows(self.views, c, {conversation: int(cursors[feed])
                                                      for conversation, feed in conversations.items()}, int(limit)):
                feed = conversations[row["conversation_id"]]
                frames[feed].append(self._frame(feed, row))
            found = self.views.conversation_heads(c, list(conversations))
        reads: dict[str, FeedRead] = {}
        for conversation, feed in conversations.items():
            row = found.get(conversation)
            reads[feed] = FeedRead(frames[feed], exists=True, deleted=bool(row and row["deleted"]), terminal=False,
                                   last_frame_id=int(row[self.kind.head]) if row else 0)
        return reads

    def heads(self, keys: Sequence[str]) -> dict[str, tuple[int, bool]]:
        if not keys:
            return {}
        conversations = {_conversation(feed): feed for feed in keys}
        with self.tables.reading() as c:
            found = self.views.conversation_heads(c, list(conversations))
        return {feed: ((int(found[conversation][self.kind.head]), bool(found[conversation]["deleted"]))
                       if conversation in found else (0, False))
                for conversation, feed in conversations.items()}

    def _frame(self, feed: str, row: Any) -> Frame:
        """An entry as the frame a stream sends: ``id`` its id in the conversation, its
        event, its data as stored (sent without being encoded again)."""
        return read_back(feed, int(row[self.kind.number]), self.kind.event(row), row["data"], "")


def _conversation(feed: str) -> str:
    conversation = conversation_of(feed)
    if conversation is None:
        raise ValueError("not a conversation's feed")
    return conversation

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
it ends when the conversation is deleted (X8). Synchronous: call from a worker thread."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imprint.delivery.frames import Frame
from imprint.delivery.notices import NOTICE_EVENT
from services.delivery.notifier import FeedRead
from services.delivery.view_tables import ViewTables, conversation_of


@dataclass(frozen=True)
class NoticesHead:
    """Where a conversation's notices stand (the fields a stream asks a run for)."""

    last_frame_id: int
    deleted: bool
    terminal: bool = False
    """A notices stream has no terminal: it is followed until the client leaves."""


class NoticeFeeds:
    """The notices of every conversation, keyed by their feed (``notice_feed(conversation)``)."""

    def __init__(self, views: ViewTables) -> None:
        self.views = views
        self.tables = views.tables

    def frames_after(self, feed: str, last_id: int, limit: int = 1000) -> list[Frame]:
        with self.tables.reading() as c:
            rows = self.views.notices_after(c, {_conversation(feed): int(last_id)}, int(limit))
        return [_frame(feed, row) for row in rows]

    def run(self, feed: str) -> NoticesHead:
        """Where the conversation's notices stand (a conversation never told anything has none yet)."""
        head = self.heads([feed]).get(feed, (0, False))
        return NoticesHead(last_frame_id=head[0], deleted=head[1])

    def read_feeds(self, cursors: Mapping[str, int], limit: int = 1000) -> dict[str, FeedRead]:
        conversations = {_conversation(feed): feed for feed in cursors}
        frames: dict[str, list[Frame]] = {feed: [] for feed in cursors}
        with self.tables.reading() as c:
            for row in self.views.notices_after(c, {conversation: int(cursors[feed])
                                                    for conversation, feed in conversations.items()}, int(limit)):
                feed = conversations[row["conversation_id"]]
                frames[feed].append(_frame(feed, row))
            found = self.views.conversation_heads(c, list(conversations))
        reads: dict[str, FeedRead] = {}
        for conversation, feed in conversations.items():
            row = found.get(conversation)
            reads[feed] = FeedRead(frames[feed], exists=True, deleted=bool(row and row["deleted"]), terminal=False,
                                   last_frame_id=int(row["last_notice_id"]) if row else 0)
        return reads

    def heads(self, keys: Sequence[str]) -> dict[str, tuple[int, bool]]:
        if not keys:
            return {}
        conversations = {_conversation(feed): feed for feed in keys}
        with self.tables.reading() as c:
            found = self.views.conversation_heads(c, list(conversations))
        return {feed: ((int(found[conversation]["last_notice_id"]), bool(found[conversation]["deleted"]))
                       if conversation in found else (0, False))
                for conversation, feed in conversations.items()}


def _conversation(feed: str) -> str:
    conversation = conversation_of(feed)
    if conversation is None:
        raise ValueError("not a notices feed")
    return conversation


def _frame(feed: str, row: Any) -> Frame:
    """A notice as the frame a stream sends: ``id`` its id in the conversation, ``event:
    notice``, its data as stored (sent without being encoded again)."""
    return Frame.read_back(feed, int(row["notice_id"]), NOTICE_EVENT, row["data"], "")

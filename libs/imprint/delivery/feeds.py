"""The keys of Delivery's live feeds: a run's is its id; a conversation's notices (D7) and its
stream (D9) follow the same mechanism under keys no run id can be — a run id is an identifier
(no control characters), and these start with one. A poll names every feed it changed by these
keys, the stores read them, a stream ticket for a conversation's notices is scoped to one."""

from __future__ import annotations

NOTICE_FEED = "\x1fnotices:"
"""A conversation's notices follow the live-feed mechanism of runs under this key prefix."""


def notice_feed(conversation_id: str) -> str:
    """The live-feed key (and stream-ticket scope) of a conversation's notices."""
    return NOTICE_FEED + conversation_id


CONVERSATION_FEED = "\x1fconversation:"
"""D9: a conversation's stream follows the same mechanism under this prefix."""


def conversation_feed(conversation_id: str) -> str:
    """The live-feed key of a conversation's stream (D9)."""
    return CONVERSATION_FEED + conversation_id


def conversation_of(feed: str) -> str | None:
    """The conversation of a conversation's feed key, its notices' or its stream's (``None``:
    a run's key)."""
    for prefix in (NOTICE_FEED, CONVERSATION_FEED):
        if feed.startswith(prefix):
            return feed[len(prefix):]
    return None

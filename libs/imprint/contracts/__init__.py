"""The v1 wire contract (SPEC §2): one pydantic model per message type and one
discriminated union per topic. ``schemas/`` is generated from these models."""

from imprint.contracts.base import Message, RunMessage, new_event_id, utcnow
from imprint.contracts.topics import Topic

__all__ = ["Message", "RunMessage", "Topic", "new_event_id", "utcnow"]

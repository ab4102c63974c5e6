"""The retention sweeper (X8): conversations idle for longer than the retention age are
deleted by the journal (its unit of work re-checks the age, so an admission that
commits meanwhile wins), then announced on ``imprint.control.v1`` as
``conversation.delete_requested`` with reason ``retention`` so Publication withdraws
their blocks and destroys their keys the same way a user's deletion does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.topics import Topic
from services.common.observability import get_logger
from services.common.settings import Settings
from services.common.kafka import Outbox
from services.journal.application import RuntimeJournal

log = get_logger(__name__)


def expired_requests(journal: RuntimeJournal, now: datetime, max_age: timedelta) -> list[ConversationDeleteRequested]:
    requests = []
    for conversation_id in journal.sweep_retention(now, max_age):
        conversation = journal.conversation(conversation_id)
        if conversation is not None:
            requests.append(ConversationDeleteRequested(
                conversation_id=conversation_id, account_id=conversation.account_id, reason="retention"))
    return requests


async def sweep_forever(journal: RuntimeJournal, outbox: Outbox, settings: Settings) -> None:
    max_age = timedelta(seconds=settings.retention_seconds)
    while True:
        await asyncio.sleep(settings.retention_sweep_seconds)
        try:
            requests = await asyncio.to_thread(expired_requests, journal, datetime.now(UTC), max_age)
            if requests:
                await outbox.publish_many((Topic.CONTROL, request) for request in requests)
                log.info("retention sweep deleted conversations", count=len(requests))
        except Exception:
            log.exception("retention sweep failed; next sweep retries")

"""What today's code makes of a golden log's stores: the ``imprint replay`` views, the
``imprint replay --verify`` result and the ``/answer`` document of every run.

* ``replay.jsonl``: ``imprint replay --json --bodies``, and ``verify.jsonl``:
  ``imprint replay --verify --json`` — the command itself, in a child process, its
  stdout as it wrote it. Either exiting non-zero is a failure here.
* ``answer/<run_id>.json``: ``GET /v1/runs/{run_id}/answer`` of a real Delivery
  (``imprint serve delivery``) that learned the runs from the logs' real relays (the
  relay classes, announcers and producers of ``services/*/relay.py``) into fresh
  topics. The relays run here, one batch after another until the log is exhausted, so
  it is known when all was sent. The Journal's log goes first and is applied by
  Delivery before the Publication log is relayed: a Delivery reading both topics at
  once may apply them in any interleaving, and what it ends up showing depends on it
  (a withdrawal that reaches a run before its ``done`` is a frame of the run, one that
  reaches it after is not), so one order is fixed. Each document is written as
  ``{"status", "account", "body"}`` in canonical JSON."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from imprint.canonical import canonical_json
from imprint.contracts.topics import Topic
from imprint.publication.announcements import ANNOUNCED_TOPICS as PUBLICATION_TOPICS
from services.common.kafka import Outbox
from services.common.launcher import child_environment
from services.common.relay import Relay
from services.common.settings import Settings
from services.delivery.auth import mint_token
from imprint.journal.announcements import ANNOUNCED_TOPICS as JOURNAL_TOPICS
from services.journal.application import open_journal
from services.journal.relay import RELAY_NAME as JOURNAL_RELAY, BatchAnnouncer
from services.publication.relay import RELAY_NAME as PUBLICATION_RELAY, announce_publication
from services.publication.application import open_log
from services.publication.sealing import BatchOpener
from tests.support.kafka import create_topics
from tests.support.stack import Stack


def observe(settings: Settings, runs: Mapping[str, str]) -> dict[str, bytes]:
    """Every expected output of a golden folder, by its path under ``expected/``."""
    outputs = {"replay.jsonl": imprint(settings, "replay", "--json", "--bodies"),
               "verify.jsonl": imprint(settings, "replay", "--verify", "--json")}
    outputs.update(served(settings, runs))
    return outputs


def imprint(settings: Settings, *args: str) -> bytes:
    done = subprocess.run([sys.executable, "-m", "services.cli", *args], env=child_environment(settings),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, f"imprint {' '.join(args)} exited {done.returncode}:\n{done.stderr.decode()[-3000:]}"
    return done.stdout


def served(settings: Settings, runs: Mapping[str, str]) -> dict[str, bytes]:
    create_topics(settings, partitions=1)
    asyncio.run(relay(settings, "journal"))
    with Stack(settings, parts=("delivery",)) as stack:
        wait_applied(settings, Topic.RUNS)
        asyncio.run(relay(settings, "publication"))
        wait_applied(settings, Topic.PUBLICATION)
        documents = {}
        for run_id, account in runs.items():
            response = httpx.get(f"{stack.base_url}/v1/runs/{run_id}/answer",
                                 headers={"Authorization": f"Bearer {mint_token(settings, account)}"})
            document: dict[str, Any] = {"status": response.status_code, "account": account, "body": response.json()}
            documents[f"answer/{run_id}.json"] = (canonical_json(document) + "\n").encode()
    return documents


async def relay(settings: Settings, log: str) -> int:
    """Relay one log from its recorded position to its end; how many positions were covered."""
    outbox = Outbox(settings, f"golden-{log}-relay")
    if log == "publication":
        app: Any = open_log(settings)
        relaying = Relay(app, announce_publication, outbox, name=PUBLICATION_RELAY,
                         to_events=BatchOpener(app.mapper, app.keyring), topics=PUBLICATION_TOPICS)
    else:
        app = open_journal(settings)
        announcer = BatchAnnouncer(app)
        relaying = Relay(app, announcer, outbox, name=JOURNAL_RELAY, to_events=announcer.to_events, topics=JOURNAL_TOPICS)
    await outbox.start()
    try:
        relaying.position = relaying.recorded_position()
        covered = 0
        while batch := await relaying.relay_once():
            covered += batch
        return covered
    finally:
        await outbox.stop()
        app.close()


def wait_applied(settings: Settings, topic: Topic, timeout: float = 60.0) -> None:
    """Until Delivery's consumer group has committed the end of ``topic`` (it commits an
    offset only after the batch it ends is in its store)."""
    deadline = time.monotonic() + timeout
    end = asyncio.run(_end_offset(settings, topic))
    while end and (committed := asyncio.run(_committed(settings, topic))) < end:
        assert time.monotonic() < deadline, f"delivery applied {topic} to {committed} of {end}"
        time.sleep(0.2)


async def _end_offset(settings: Settings, topic: Topic) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(settings.topic(topic), 0)
        return int((await consumer.end_offsets([partition]))[partition])
    finally:
        await consumer.stop()


async def _committed(settings: Settings, topic: Topic) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        partition = TopicPartition(settings.topic(topic), 0)
        offsets = await admin.list_consumer_group_offsets(f"{settings.group_prefix}.delivery", partitions=[partition])
        found = offsets.get(partition)
        return -1 if found is None else found.offset
    finally:
        await admin.close()

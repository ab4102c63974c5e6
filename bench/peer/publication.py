"""The peer's publication: one runtime message per call → the run's aggregate in an
eventsourcing ``Application`` on PostgreSQL → one awaited publish per block.

``python -m bench.peer.publication BOOTSTRAP RUNTIME_TOPIC OUTPUT_TOPIC DATABASE_URL SCHEMA``"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from faststream import FastStream
from faststream.kafka import KafkaBroker

RUN_NAMESPACE = uuid.UUID("0b7f1a52-55d4-4d8e-9a64-3f3c6fd0c1a7")


def run_aggregate_id(run_id: str) -> uuid.UUID:
    return uuid.uuid5(RUN_NAMESPACE, run_id)


class Run(Aggregate):
    """One run: what it was granted and the blocks accepted so far."""

    @event("Admitted")
    def __init__(self, run_id: str, account_id: str) -> None:
        self.run_id = run_id
        self.account_id = account_id
        self.sources: list[str] = []
        self.blocks: list[dict[str, Any]] = []

    @classmethod
    def create_id(cls, run_id: str, account_id: str) -> uuid.UUID:
        return run_aggregate_id(run_id)

    @event("Granted")
    def grant(self, grant: dict[str, Any]) -> None:
        self.sources.append(grant.get("source_id") or grant.get("handle_id") or "")

    @event("PartAccepted")
    def accept(self, candidate: str, blocks: list[dict[str, Any]]) -> None:
        self.blocks.extend(blocks)


class Runs(Application[uuid.UUID]):
    name = "peer"


def proposal(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The candidate and the blocks an ``answer.part`` (entry B) or ``answer.text`` (entry A) proposes."""
    if body["type"] == "answer.text":
        return f"text:{body['turn_id']}:{body['segment']}", [{"markdown": body["text"]}]
    return f"tool:{body['tool_call_id']}", (body.get("arguments") or {}).get("blocks") or []


def blocks_of(run: Run, candidate: str, proposed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The proposal's blocks with their ids and ordinals in the run."""
    first = len(run.blocks)
    return [{"block_id": f"{run.run_id}:{first + i}", "candidate_id": candidate, "ordinal": first + i,
             "role": block.get("role", "body"), "markdown": block.get("markdown", "")}
            for i, block in enumerate(proposed)]


def main(bootstrap: str, runtime_topic: str, output_topic: str, database_url: str, schema: str) -> None:
    from urllib.parse import unquote, urlparse

    url = urlparse(database_url)
    runs = Runs({"PERSISTENCE_MODULE": "eventsourcing.postgres", "POSTGRES_DBNAME": url.path.lstrip("/"),
                 "POSTGRES_HOST": url.hostname or "127.0.0.1", "POSTGRES_PORT": str(url.port or 5432),
                 "POSTGRES_USER": unquote(url.username or ""), "POSTGRES_PASSWORD": unquote(url.password or ""),
                 "POSTGRES_SCHEMA": schema, "CREATE_TABLE": "y"})
    broker = KafkaBroker(bootstrap, log_level=logging.DEBUG)  # each message's log line off, as imprint's parts run
    app = FastStream(broker)

    @broker.subscriber(runtime_topic, group_id=f"{runtime_topic}.publication", auto_offset_reset="earliest")
    async def on_runtime(body: dict[str, Any]) -> None:
        kind = body.get("type")
        if kind == "run.admitted":
            runs.save(Run(body["run_id"], body.get("account_id", "")))
        elif kind in ("evidence.granted", "numeric.issued"):
            run = runs.repository.get(run_aggregate_id(body["run_id"]))
            run.grant(body)
            runs.save(run)
        elif kind in ("answer.part", "answer.text"):
            candidate, proposed = proposal(body)
            run = runs.repository.get(run_aggregate_id(body["run_id"]))
            blocks = blocks_of(run, candidate, proposed)
            run.accept(candidate, blocks)
            runs.save(run)
            for block in blocks:
                await broker.publish({"type": "answer.published", "run_id": run.run_id, "block": block},
                                     output_topic, key=run.run_id.encode())

    asyncio.run(app.run())


if __name__ == "__main__":
    main(*sys.argv[1:6])

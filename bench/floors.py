"""What the hardware and the libraries allow, measured in the same run as imprint:

* **transport floor**: raw aiokafka produce → consume of the same proposal bytes
  through the same broker (idempotent producer, acks=all, no processing);
* **commit floor**: one ``INSERT`` + ``COMMIT`` per proposal with psycopg on the same
  database (durability on: whatever ``fsync``/``synchronous_commit`` the server has);
* **naive peer**: an eventsourcing ``Application`` on the same PostgreSQL doing
  ``repository.get`` + one triggered event + ``save`` per proposal (no cache, no
  snapshots, no batching), on runs of the same sizes as imprint's."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from bench.stats import latency_summary
from bench.workload import proposal_bytes
from services.common.settings import Settings


# ------------------------------------------------------------------ transport floor


async def transport_floor(settings: Settings, topic: str, rates: tuple[int, ...], seconds: float,
                          burst: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    value = proposal_bytes()
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                auto_offset_reset="latest", enable_auto_commit=False)
    await producer.start()
    await consumer.start()
    await consumer.seek_to_end()
    results: dict[str, Any] = {"bytes": len(value), "paced": {}}
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}

    async def read(until: int) -> None:
        while len(arrived) < until:
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for records in batch.values():
                for record in records:
                    if record.key in sent:
                        arrived.setdefault(record.key, now)

    try:
        # warm up the connection and the partition leader
        await producer.send_and_wait(topic, value, key=b"warm")
        for rate in rates:
            sent.clear()
            arrived.clear()
            count = max(1, int(rate * seconds))
            reader = asyncio.create_task(read(count))
            start = time.perf_counter() + 0.05
            for i in range(count):
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                key = f"t{rate}-{i}".encode()
                sent[key] = due
                await producer.send(topic, value, key=key)
            await asyncio.wait_for(reader, 60)
            latencies = [(arrived[k] - sent[k]) * 1000 for k in sent]
            results["paced"][str(rate)] = {**latency_summary(latencies), "_samples": latencies}
        # burst: everything at once, produced without waiting
        sent.clear()
        arrived.clear()
        for i in range(burst):
            sent[f"b-{i}".encode()] = 0.0
        reader = asyncio.create_task(read(burst))
        started = time.perf_counter()
        futures = [await producer.send(topic, value, key=f"b-{i}".encode()) for i in range(burst)]
        await asyncio.gather(*futures)
        await asyncio.wait_for(reader, 120)
        seconds_taken = max(arrived.values()) - started
        results["burst"] = {"messages": burst, "seconds": round(seconds_taken, 3),
                            "per_s": round(burst / seconds_taken)}
    finally:
        await consumer.stop()
        await producer.stop()
    return results


# ------------------------------------------------------------------ commit floor


def commit_floor(settings: Settings, count: int) -> dict[str, Any]:
    value = proposal_bytes()
    schema = sql.Identifier(str(settings.database_schema))
    with psycopg.connect(str(settings.database_url)) as connection:
        settings_row = {name: connection.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                        for name in ("fsync", "synchronous_commit", "wal_sync_method", "full_page_writes")}
        connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {}.commit_floor (id bigserial PRIMARY KEY, "
                                   "run_id text NOT NULL, body bytea NOT NULL)").format(schema))
        connection.commit()
        insert = sql.SQL("INSERT INTO {}.commit_floor (run_id, body) VALUES (%s, %s)").format(schema)
        for i in range(20):
            connection.execute(insert, ("warm", value))
            connection.commit()
        started = time.perf_counter()
        for i in range(count):
            connection.execute(insert, (f"run-{i // 25}", value), prepare=True)
            connection.commit()
        seconds = time.perf_counter() - started
        paced = _paced_commits(connection, insert, value, PACED_COMMIT_RATE, PACED_COMMIT_SECONDS)
    return {"proposals": count, "seconds": round(seconds, 3), "per_s": round(count / seconds),
            "ms_per_commit": round(seconds * 1000 / count, 3), "server": settings_row,
            "paced": {"offered_per_s": PACED_COMMIT_RATE, **latency_summary(paced)}}


PACED_COMMIT_RATE = 300
PACED_COMMIT_SECONDS = 10.0


def _paced_commits(connection: Any, insert: Any, value: bytes, rate: float, seconds: float) -> list[float]:
    """The latency of each INSERT + COMMIT at ``rate`` per second (open loop, from its
    scheduled time): what one durable commit's tail is on this disk, the floor under any
    produce → published latency (which holds at least one such commit)."""
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        connection.execute(insert, ("paced", value), prepare=True)
        connection.commit()
        latencies.append((time.perf_counter() - due) * 1000)
    return latencies


# ------------------------------------------------------------------ naive peer


def naive_peer(settings: Settings, run_sizes: tuple[int, ...], proposals: int) -> dict[str, Any]:
    """An eventsourcing Application with one aggregate per run; per proposal:
    ``get`` the run, trigger one event carrying the two blocks, ``save``."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    from services.common.eventstore import store_environment

    class NaiveRun(Aggregate):
        @event("Admitted")
        def __init__(self, run_id: str) -> None:
            self.run_id = run_id
            self.blocks: list[str] = []

        @event("Committed")
        def commit(self, blocks: list[str]) -> None:
            self.blocks.extend(blocks)

    class NaiveLog(Application[uuid.UUID]):
        name = "naive"

    payload = proposal_bytes().decode()
    half = len(payload) // 2
    env = store_environment(settings, "naive")
    env.pop("ORIGINATOR_ID_TYPE", None)
    app = NaiveLog(env)
    results: dict[str, Any] = {"proposals_per_size": proposals, "per_run_size": {}}
    try:
        for size in run_sizes:
            runs = max(1, proposals // size)
            ids = []
            for r in range(runs):
                aggregate = NaiveRun(f"naive-{size}-{r}")
                app.save(aggregate)
                ids.append(aggregate.id)
            started = time.perf_counter()
            cpu = time.process_time()
            for r, aggregate_id in enumerate(ids):
                for p in range(size):
                    aggregate = app.repository.get(aggregate_id)
                    aggregate.commit([payload[:half], payload[half:]])
                    app.save(aggregate)
            seconds = time.perf_counter() - started
            done = runs * size
            results["per_run_size"][str(size)] = {
                "proposals": done, "seconds": round(seconds, 3), "per_s": round(done / seconds),
                "client_cpu_ms_per_proposal": round((time.process_time() - cpu) * 1000 / done, 3)}
    finally:
        app.close()
    return results

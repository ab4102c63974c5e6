"""What the hardware and the libraries allow, measured in the same run as imprint:

* **transport floor**: raw aiokafka produce → consume of the same proposal bytes
  through the same broker (idempotent producer, acks=all, no processing);
* **commit floor**: one ``INSERT`` + ``COMMIT`` per proposal with psycopg on the same
  database (durability on: whatever ``fsync``/``synchronous_commit`` the server has);
* **naive peer**: an eventsourcing ``Application`` on the same PostgreSQL doing
  ``repository.get`` + one triggered event + ``save`` per proposal (no cache, no
  snapshots, no batching), on runs of the same sizes as imprint's;
* **consumer floor**: a bare consumer process doing what every imprint part does
  around a poll and nothing else — aiokafka poll (the parts' poll settings), one
  psycopg transaction per poll (one ``INSERT`` per record, in a worker thread),
  one produce per record (idempotent, acks=all), the acknowledgements awaited — at
  paced loads: its CPU per message and its produce → produced latency, the price of
  the plumbing alone, against which a part's CPU at the same offered load is read.

The commit floor and the naive peer also record what they cost the whole machine per
proposal (busy core-seconds from /proc/stat, every process and the kernel), the figure
imprint's burst is read against per unit of CPU (``report.machine_cpu_section``)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from bench.procs import machine_cpu_seconds
from bench.stats import latency_summary
from bench.workload import proposal_bytes
from services.common.subscription import FETCH_WAIT_MS, IDLE_POLL_MS
from services.common.launcher import Launcher
from services.common.settings import Settings


READER_FETCH_WAIT_MS = FETCH_WAIT_MS
"""The broker's longest hold of a fetch by every reader that times arrivals (here and in
``bench.e2e``): the parts' own bound (``services.common.subscription.FETCH_WAIT_MS``). With
aiokafka's default of 500 ms, a reader that fell behind by one poll could find its next
fetch holding only quiet partitions, and an arrival then waited up to half a second on
the instrument, not on the system measured."""


# ------------------------------------------------------------------ transport floor


async def transport_floor(settings: Settings, topic: str, rates: tuple[float, ...], seconds: float,
                          burst: int) -> dict[str, Any]:
    """Produce → consume latency at each offered rate (open loop), then a burst's messages/s
    (none when ``burst`` is 0)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    value = proposal_bytes()
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                auto_offset_reset="latest", enable_auto_commit=False,
                                fetch_max_wait_ms=READER_FETCH_WAIT_MS)
    await producer.start()
    await consumer.start()
    await consumer.seek_to_end()
    results: dict[str, Any] = {"bytes": len(value), "paced": {}}
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}

    async def read(until: int) -> None:
        while len(arrived) < until:
            await _arrivals(consumer, sent, arrived)

    try:
        # warm up the connection and the partition leader
        await producer.send_and_wait(topic, value, key=b"warm")
        for rate in rates:
            sent.clear()
            arrived.clear()
            count = max(1, int(rate * seconds))
            reader = asyncio.create_task(read(count))
            await _offer(producer, topic, value, rate, count, sent, lambda i: f"t{rate}-{i}")
            await asyncio.wait_for(reader, 60)
            latencies = [(arrived[k] - sent[k]) * 1000 for k in sent]
            results["paced"][str(rate)] = {**latency_summary(latencies), "_samples": latencies}
        if not burst:
            return results
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


async def _offer(producer: Any, topic: str, value: bytes, rate: float, count: int, sent: dict[bytes, float],
                 key: Any) -> None:
    """Send ``count`` messages at ``rate`` a second, open loop: each one's clock (``sent``, by
    its key ``key(i)``) starts at its scheduled time, not when the send got round to it."""
    start = time.perf_counter() + 0.05
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        name = key(i).encode()
        sent[name] = due
        await producer.send(topic, value, key=name)


async def _arrivals(consumer: Any, sent: dict[bytes, float], arrived: dict[bytes, float]) -> None:
    """One poll of ``consumer``: when each message sent (and not yet seen) arrived."""
    batch = await consumer.getmany(timeout_ms=100)
    now = time.perf_counter()
    for records in batch.values():
        for record in records:
            if record.key in sent:
                arrived.setdefault(record.key, now)


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
        started, machine = time.perf_counter(), machine_cpu_seconds()
        for i in range(count):
            connection.execute(insert, (f"run-{i // 25}", value), prepare=True)
            connection.commit()
        seconds = time.perf_counter() - started
        machine = machine_cpu_seconds() - machine
        paced = _paced_commits(connection, insert, value, PACED_COMMIT_RATE, PACED_COMMIT_SECONDS)
    return {"proposals": count, "seconds": round(seconds, 3), "per_s": round(count / seconds),
            "ms_per_commit": round(seconds * 1000 / count, 3), "server": settings_row,
            "machine_cpu_ms_per_proposal": round(machine * 1000 / count, 3),
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

    from services.common.backends import backend_for

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
    env = backend_for(settings).environment("naive")
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
            started, machine = time.perf_counter(), machine_cpu_seconds()
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
                "client_cpu_ms_per_proposal": round((time.process_time() - cpu) * 1000 / done, 3),
                "machine_cpu_ms_per_proposal": round((machine_cpu_seconds() - machine) * 1000 / done, 3)}
    finally:
        app.close()
    return results


# ------------------------------------------------------------------ consumer floor

CONSUMER_FLOOR_POLL_MS = IDLE_POLL_MS
"""The parts' own poll settings (``services.common.kafka``), so the floor follows them."""
CONSUMER_FLOOR_FETCH_WAIT_MS = FETCH_WAIT_MS
CONSUMER_FLOOR = "consumer-floor"
"""The bare consumer's name among the launcher's children (its log: ``<state>/logs/consumer-floor.log``)."""


async def consumer_floor(settings: Settings, topic_in: str, topic_out: str, rates: tuple[int, ...],
                         seconds: float) -> dict[str, Any]:
    """The bare consumer (:func:`_consume`) as its own process (a command of the launcher);
    this process offers it proposals at each rate and reads what it produces. Per rate: the
    consumer's CPU (/proc: all its threads) per message and in cores, and produce → produced
    latency."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from bench.procs import cpu_seconds

    value = proposal_bytes()
    launcher = Launcher(settings)
    child = launcher.start_command(CONSUMER_FLOOR, "bench.floors", [
        "consume", settings.kafka_bootstrap, topic_in, topic_out, str(settings.database_url),
        str(settings.database_schema)], env={"PYTHONPATH": os.pathsep.join(sys.path)})  # bench is no installed package
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=0)
    reader = AIOKafkaConsumer(topic_out, bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                              auto_offset_reset="latest", enable_auto_commit=False,
                              fetch_max_wait_ms=READER_FETCH_WAIT_MS)
    await producer.start()
    await reader.start()
    await reader.seek_to_end()
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}

    async def read() -> None:
        while True:
            await _arrivals(reader, sent, arrived)

    reading = asyncio.create_task(read())

    async def until_arrived(count: int, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while len(arrived) < count:
            if child.returncode is not None:
                raise RuntimeError(f"the floor's consumer exited: {launcher.log(CONSUMER_FLOOR)[-500:]}")
            if time.perf_counter() > deadline:
                raise TimeoutError(f"the floor's consumer relayed {len(arrived)} of {count}")
            await asyncio.sleep(0.05)

    results: dict[str, Any] = {"bytes": len(value), "poll_ms": CONSUMER_FLOOR_POLL_MS,
                               "fetch_wait_ms": CONSUMER_FLOOR_FETCH_WAIT_MS, "paced": {}}
    try:
        sent[b"warm"] = time.perf_counter()  # the consumer joins its group, the leaders are found
        await producer.send_and_wait(topic_in, value, key=b"warm")
        await until_arrived(1, 90)
        await asyncio.sleep(2)  # an idle consumer's own cost out of the first window
        for rate in rates:
            sent.clear()
            arrived.clear()
            count = max(1, int(rate * seconds))
            cpu_before, wall_before = cpu_seconds(child.pid), time.perf_counter()
            await _offer(producer, topic_in, value, rate, count, sent, lambda i: f"c{rate}-{i}-{run_key(i)}")
            await until_arrived(count, 60)
            cpu_after, wall_after = cpu_seconds(child.pid), time.perf_counter()
            cpu = (cpu_after or 0.0) - (cpu_before or 0.0)
            latencies = [(arrived[k] - sent[k]) * 1000 for k in sent]
            results["paced"][str(rate)] = {
                **latency_summary(latencies), "messages": count,
                "cpu_ms_per_message": round(cpu * 1000 / count, 3),
                "cores": round(cpu / (wall_after - wall_before), 3)}
    finally:
        reading.cancel()
        launcher.stop(CONSUMER_FLOOR, grace=10.0)
        await reader.stop()
        await producer.stop()
    return results


def run_key(i: int) -> str:
    """Keys spread over the partitions like runs are (200 of them)."""
    return f"run-{i % 200}"


async def _consume(bootstrap: str, topic_in: str, topic_out: str, database_url: str, schema: str) -> None:
    """Poll; one transaction per poll, in a worker thread; one produce per record; await the
    acknowledgements. No offsets are committed (the parts commit theirs every few seconds)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    connection = psycopg.connect(database_url)
    table = sql.SQL("{}.consumer_floor").format(sql.Identifier(schema))
    connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, run_id text NOT NULL, "
                               "body bytea NOT NULL)").format(table))
    connection.commit()
    insert = sql.SQL("INSERT INTO {} (run_id, body) VALUES (%s, %s)").format(table)

    def record(records: list[Any]) -> None:
        with connection.transaction(), connection.cursor() as cursor:
            cursor.executemany(insert, [(r.key.decode(), r.value) for r in records])

    consumer = AIOKafkaConsumer(topic_in, bootstrap_servers=bootstrap, group_id=f"consumer-floor-{topic_in}",
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_wait_ms=CONSUMER_FLOOR_FETCH_WAIT_MS)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=2)
    await consumer.start()
    await producer.start()
    try:
        while True:
            polled = await consumer.getmany(timeout_ms=CONSUMER_FLOOR_POLL_MS, max_records=500)
            records = [r for batch in polled.values() for r in batch]
            if not records:
                continue
            await asyncio.to_thread(record, records)
            acknowledgements = [await producer.send(topic_out, r.value, key=r.key) for r in records]
            await asyncio.gather(*acknowledgements)
    finally:
        await consumer.stop()
        await producer.stop()
        connection.close()


if __name__ == "__main__" and sys.argv[1:2] == ["consume"]:
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_consume(*sys.argv[2:7]))

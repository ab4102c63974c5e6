"""The ``peer`` phase of ``python -m bench``: the peer stack (:mod:`bench.peer`) as processes
beside imprint's broker and PostgreSQL, offered what imprint's ``cpu`` and ``latency``
phases offered imprint, measured the same way.

While the peer runs, imprint's parts are stopped (and started again after), and the bench's
Kafka reader is paused: an idle stack's polls land in the broker's CPU, and neither stack is
charged for the other's. Each window counts every peer process, the broker and PostgreSQL
(:class:`bench.procs.Stack`), and the bench's producer and SSE clients apart."""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from psycopg import sql

from bench import sse
from bench.e2e import BLOCKS_PER_PROPOSAL
from bench.floors import READER_FETCH_WAIT_MS
from bench.peer.delivery import create_frames
from bench.procs import Stack, infra_pids, tree_cpu_seconds
from bench.stats import latency_summary, median_of_rounds
from bench.workload import Sources, opening, paced_parts, typical_part, wire
from services.common.settings import Settings

PROCESSES = ("peer-publication", "peer-delivery", "peer-sse")
TOPICS = ("peer.runtime", "peer.published")
"""The peer's input (the runtime's messages, as imprint's runtime topic carries them) and output."""


class PeerStack(Stack):
    """The peer's processes, children of their own launcher, measured like imprint's parts."""

    def __init__(self, settings: Settings, port: int) -> None:
        super().__init__(settings, ())
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        s = self.settings
        url, schema = str(s.database_url), str(s.database_schema)
        runtime, published = (s.topic(t) for t in TOPICS)
        env = {"PYTHONPATH": os.pathsep.join(sys.path)}  # bench is no installed package
        for name, module, args in (
                ("peer-publication", "bench.peer.publication", [s.kafka_bootstrap, runtime, published, url, schema]),
                ("peer-delivery", "bench.peer.delivery", [s.kafka_bootstrap, published, url, schema]),
                ("peer-sse", "bench.peer.sse", [url, schema, "127.0.0.1", str(self.port)])):
            self.launcher.start_command(name, module, args, env=env)
        self.sampler.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the peer's SSE endpoint did not answer:\n{self.log('peer-sse')[-2000:]}")
            time.sleep(0.2)


class PeerDriver:
    """One producer onto the peer's runtime topic, SSE clients on the peer's endpoint."""

    def __init__(self, settings: Settings, stack: PeerStack, token: str) -> None:
        self.settings, self.stack, self.token = settings, stack, token
        self.topic = settings.topic(TOPICS[0])
        self.sse: dict[str, list[float]] = defaultdict(list)
        self.published: dict[str, list[float]] = defaultdict(list)
        self.clients: list[sse.SseClient] = []

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True,
                                         linger_ms=0, max_request_size=4 * 1024 * 1024)
        await self.producer.start()

    async def stop(self) -> None:
        self.close_clients()
        await self.producer.stop()

    async def send(self, messages: Iterable[Any]) -> None:
        futures = []
        for message in messages:
            key, value, headers = wire(message)
            futures.append(await self.producer.send(self.topic, value, key=key, headers=headers))
        if futures:
            await asyncio.gather(*futures)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=50, max_records=5000)
            now = time.perf_counter()
            for records in batch.values():
                for record in records:
                    block = json.loads(record.value)["block"]
                    self.published[block["candidate_id"].removeprefix("tool:")].append(now)

    def published_at(self, call: str) -> float | None:
        times = self.published.get(call) or ()
        return times[BLOCKS_PER_PROPOSAL - 1] if len(times) >= BLOCKS_PER_PROPOSAL else None

    def stored_events(self) -> int:
        table = sql.SQL("{}.peer_events").format(sql.Identifier(str(self.settings.database_schema)))
        with psycopg.connect(str(self.settings.database_url)) as connection:
            try:
                return int(connection.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0])  # type: ignore[index]
            except psycopg.errors.UndefinedTable:
                return 0

    async def admit(self, runs: list[str], sources: Sources, timeout: float = 300) -> None:
        """Open every run and wait until the peer has stored every opening event; then one
        SSE client on each run."""
        openings = [m for run in runs for m in opening(run, sources)]
        expected = await asyncio.to_thread(self.stored_events) + len(openings)
        await self.send(openings)
        deadline = time.monotonic() + timeout
        while await asyncio.to_thread(self.stored_events) < expected:
            self.stack.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the peer did not store {len(openings)} opening events within {timeout} s")
            await asyncio.sleep(0.1)
        gate = asyncio.Semaphore(50)

        def on_frame(kind: str, call: str, now: float) -> None:
            if kind == "published":
                self.sse[call].append(now)

        async def one(run: str) -> sse.SseClient:
            async with gate:
                return await sse.connect("127.0.0.1", self.stack.port, run, self.token, on_frame, retry_for=60)

        self.clients.extend(await asyncio.gather(*(one(run) for run in runs)))

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients = []

    def streamed_at(self, call: str) -> float | None:
        times = sorted(self.sse.get(call) or ())
        return times[BLOCKS_PER_PROPOSAL - 1] if len(times) >= BLOCKS_PER_PROPOSAL else None

    async def streamed(self, calls: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        pending = list(calls)
        while pending:
            pending = [c for c in pending if self.streamed_at(c) is None]
            if pending and time.monotonic() > deadline:
                return False
            self.stack.check_alive()
            await asyncio.sleep(0.01)
        return True

    def _figures(self, window: dict[str, Any], count: int) -> dict[str, Any]:
        return {"stack_cpu_ms_per_proposal": round(window["stack_cpu_s"] * 1000 / count, 3),
                "machine_cpu_ms_per_proposal": round(window["machine_cpu_s"] * 1000 / count, 3),
                "bench_cpu_ms_per_proposal": round(window["bench_cpu_s"] * 1000 / count, 3),
                "cpu_ms_per_proposal": {p: round(c * 1000 / count, 3)
                                        for p, c in {**window["cpu_s"], **window["infra_cpu_s"]}.items()},
                "window": window}

    async def burst(self, label: str, proposals: int, per_run: int, sources: Sources,
                    timeout: float = 600) -> dict[str, Any]:
        """Everything produced at once, round-robin over runs of ``per_run`` with one SSE
        client each; the window from the first produce to the last proposal's second frame."""
        runs = [f"run-{label}-{r:05d}" for r in range(max(1, math.ceil(proposals / per_run)))]
        await self.admit(runs, sources)
        calls = [f"{label}-{i:06d}" for i in range(proposals)]
        try:
            window = self.stack.window()
            started = time.perf_counter()
            await self.send(typical_part(runs[i % len(runs)], call, sources) for i, call in enumerate(calls))
            complete = await self.streamed(calls, timeout)
            closed = self.stack.close(window)
        finally:
            self.close_clients()
        last = max((self.streamed_at(c) or 0.0) for c in calls)
        return {"proposals": proposals, "per_run": per_run, "runs": len(runs), "sse_clients": len(runs),
                "complete": complete, "seconds": round(last - started, 3),
                "per_s": round(proposals / (last - started), 1) if complete else None,
                **self._figures(closed, proposals)}

    async def paced(self, label: str, rate: float, seconds: float, runs: int, sources: Sources,
                    drain: float) -> dict[str, Any]:
        """Offered ``rate`` proposals/s for ``seconds`` (open loop: each proposal's clock starts
        at its scheduled time) over ``runs`` runs with one SSE client each, as
        :meth:`bench.e2e.Driver.paced` offers imprint; the window closes at the last frame
        (or ``drain`` s after the last scheduled send; one unseen counts the time waited)."""
        count = max(1, int(rate * seconds))
        names = [f"run-{label}-{r:05d}" for r in range(max(1, min(runs, count)))]
        # Observed as imprint's paced loads are: a reader of the stack's output topic (the
        # bench's Driver reads imprint's publication topic with these settings), whose
        # fetches the broker serves in the window.
        consumer = AIOKafkaConsumer(self.settings.topic(TOPICS[1]), bootstrap_servers=self.settings.kafka_bootstrap,
                                    group_id=None, auto_offset_reset="latest", enable_auto_commit=False,
                                    max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_wait_ms=READER_FETCH_WAIT_MS)
        await consumer.start()
        await consumer.seek_to_end()
        reader = asyncio.create_task(self._read(consumer))
        await self.admit(names, sources)
        calls = [f"{label}-{i:06d}" for i in range(count)]
        scheduled: dict[str, float] = {}
        try:
            window = self.stack.window()
            scheduled, futures, late = await paced_parts(self.producer, self.topic, calls, names, rate, sources)
            await asyncio.gather(*futures)
            last_due = scheduled[calls[-1]]
            complete = await self.streamed(calls, max(1.0, last_due + drain - time.perf_counter()))
            ended = time.perf_counter()
            closed = self.stack.close(window)
        finally:
            self.close_clients()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await consumer.stop()
        published = [((self.published_at(c) or ended) - scheduled[c]) * 1000 for c in calls]
        latencies, missing = [], 0
        for call in calls:
            seen = self.streamed_at(call)
            if seen is None:
                missing += 1
                seen = ended
            latencies.append((seen - scheduled[call]) * 1000)
        return {"offered_per_s": round(rate, 1), "seconds": seconds, "proposals": count, "runs": len(names),
                "sse_clients": len(names), "complete": complete, "sse_unfinished_at_deadline": missing,
                "producer_max_lateness_ms": round(late * 1000, 1), "sse_ms": latency_summary(latencies),
                "published_ms": latency_summary(published),
                "_samples": latencies, **self._figures(closed, count)}


def servers_cores(settings: Settings, seconds: float) -> dict[str, float]:
    """Cores the broker and PostgreSQL are busy for ``seconds`` (every process of theirs): with
    neither stack running, what the rest of the machine's users cost them, read beside the
    stacks' figures (which include it)."""
    pids = infra_pids(settings)
    before = {name: tree_cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: round(((tree_cpu_seconds(pid) or 0.0) - before[name]) / seconds, 3) for name, pid in pids.items()}


async def _topics(settings: Settings, partitions: int, create: bool) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        names = [settings.topic(t) for t in TOPICS]
        if create:
            await admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names])
        else:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def peer(ctx: Any) -> None:
    """The peer in a burst (``stack_cpu_proposals`` in runs of 25, one SSE client per run, the
    median of ``rounds``, as the ``cpu`` phase) and paced at the latency phase's lowest load of
    imprint's burst rate (over ``latency_runs`` runs for ``latency_seconds``, one SSE client
    each, as the ``latency`` phase)."""
    from bench.phases import PER_RUN, sources

    plan, settings, imprint = ctx.plan, ctx.settings, ctx.stack
    load = min(plan.latency_loads)
    rate = load * ctx.burst_rate()
    partitions = len(await ctx.driver.producer.partitions_for(ctx.driver.runtime))
    ctx.say("peer: stopping imprint's parts (each stack measured alone); starting the peer")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        stack = PeerStack(settings, int(free.getsockname()[1]))
    driver = PeerDriver(settings, stack, ctx.driver.token)
    out: dict[str, Any] = ctx.e2e.setdefault("peer", {})
    parts = list(imprint.pids())
    started = False
    ctx.driver.pause_reader()
    try:
        for part in parts:
            imprint.launcher.stop(part)
        out["servers_cores_without_either_stack"] = await asyncio.to_thread(servers_cores, settings, 5.0)
        ctx.say(f"  the broker and PostgreSQL with neither stack running: "
                f"{out['servers_cores_without_either_stack']} cores")
        await _topics(settings, partitions, create=True)
        with psycopg.connect(str(settings.database_url), autocommit=True) as connection:
            create_frames(connection, str(settings.database_schema))
        stack.start()
        await asyncio.to_thread(stack.wait_ready)
        await driver.start()
        started = True
        warm = await driver.burst("peer-warm", 50, PER_RUN, sources("peer-warm"), timeout=120)
        ctx.say(f"  warm: {warm['per_s']}/s")
        rows = []
        for round_ in range(plan.rounds):
            ctx.say(f"peer burst: {plan.stack_cpu_proposals} proposals in runs of {PER_RUN}, one SSE client per run "
                    f"(round {round_ + 1}/{plan.rounds})")
            row = await driver.burst(f"peer-r{round_}", plan.stack_cpu_proposals, PER_RUN, sources(f"peer-r{round_}"))
            rows.append(row)
            ctx.say(f"  {row['per_s']}/s, stack CPU {row['stack_cpu_ms_per_proposal']} ms/proposal (machine "
                    f"{row['machine_cpu_ms_per_proposal']}, bench {row['bench_cpu_ms_per_proposal']}): "
                    f"{row['cpu_ms_per_proposal']}")
        burst = out["burst"] = median_of_rounds(rows, rate="stack_cpu_ms_per_proposal", figures=(
            "stack_cpu_ms_per_proposal", "machine_cpu_ms_per_proposal", "bench_cpu_ms_per_proposal", "per_s"))
        ctx.windows["peer burst, to the SSE frame"] = burst["window"]
        ctx.say(f"peer paced: {load:.0%} of imprint's burst ({rate:.0f}/s) for {plan.latency_seconds:.0f} s over "
                f"{plan.latency_runs} runs, one SSE client each")
        paced = await driver.paced(f"peer-paced{round(load * 1000)}", rate, plan.latency_seconds, plan.latency_runs,
                                   sources("peer-paced"), drain=max(5.0, plan.latency_seconds))
        samples = paced.pop("_samples")
        ctx.samples[f"peer produce→sse @{load:.0%}"] = samples
        paced["load"] = load
        out["paced"] = paced
        ctx.windows[f"peer paced {load:.0%} ({rate:.0f}/s)"] = paced["window"]
        ctx.say(f"  stack CPU {paced['stack_cpu_ms_per_proposal']} ms/proposal (machine "
                f"{paced['machine_cpu_ms_per_proposal']}), sse {paced['sse_ms']}, complete {paced['complete']}")
    finally:
        if started:
            await driver.stop()
        stack.stop()
        try:
            await _topics(settings, partitions, create=False)
        except Exception:  # noqa: BLE001 — cleanup only (the run's own topics go with it)
            pass
        for part in parts:
            imprint.launcher.restart(part)
        await asyncio.to_thread(imprint.wait_ready)
        ctx.driver.resume_reader()

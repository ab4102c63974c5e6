"""imprint end to end, driven only from outside: proposals produced to
``imprint.runtime.v1`` (each run admitted first), ``answer.preview`` /
``answer.published`` consumed from ``imprint.publication.v1``, frames read from
Delivery's SSE endpoint, CPU and RSS of each ``imprint serve`` process from /proc.

Completion of a consumer (Publication on the runtime topic, Delivery on the
publication topic) is read from its Kafka consumer group's committed offsets."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from bench import sse
from bench.floors import READER_FETCH_WAIT_MS
from bench.procs import Stack
from bench.stats import latency_summary, slope
from bench.workload import Sources, candidate_of, closing, opening, paced_parts, typical_part, wire
from imprint.contracts.runtime import RunAdmitted
from imprint.contracts.topics import Topic
from services.common.settings import Settings

BLOCKS_PER_PROPOSAL = 2
QUIET = {"publication": (Topic.RUNTIME,), "journal": (Topic.RUNTIME, Topic.PUBLICATION),
         "delivery": (Topic.PUBLICATION, Topic.RUNS)}
"""What each consumer reads, for :meth:`Driver.quiet`."""
MAX_LATENCY_SLOPE = 0.05
"""Seconds of latency gained per second of load above which the backlog is growing."""


def keeps_up(step: dict[str, Any]) -> bool:
    """A paced step kept up when every proposal was published by the deadline and the
    latency did not grow with the send time (a growing backlog makes it grow linearly)."""
    return bool(step.get("complete")) and step.get("latency_slope", 1.0) < MAX_LATENCY_SLOPE


@dataclass
class Arrivals:
    """When each proposal's blocks were seen: on Kafka (preview, published) and by SSE clients."""

    kafka: dict[str, dict[str, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    sse: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    other: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stamps: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    """Each preview's and publication's Kafka ``CreateTime`` (ms since the epoch): when the
    part that sent it handed it to its producer."""

    def stamped(self, call: str, kind: str = "published") -> int | None:
        """When the last of the proposal's blocks of ``kind`` was sent (``CreateTime``)."""
        stamps = sorted(self.stamps.get(candidate_of(call), {}).get(kind, ()))
        return stamps[BLOCKS_PER_PROPOSAL - 1] if len(stamps) >= BLOCKS_PER_PROPOSAL else None

    def hops(self, calls: Iterable[str], scheduled: Mapping[str, float], sent: Mapping[str, int],
             epoch: float) -> dict[str, dict[str, Any]]:
        """Where each proposal's latency went, from the Kafka ``CreateTime`` of the proposal
        (``sent``: this process's producer) and of what Publication and its relay sent (one
        clock: every process runs on this machine): scheduled → the proposal sent (this
        process's own lateness); proposal sent → Publication sent the preview (the inbound
        hop, the wait for the poll before it, the poll and the decision); preview sent →
        seen here; preview sent → the relay sent the publication (the commit and the relay);
        publication sent → seen here. ``epoch`` turns this process's ``perf_counter`` into
        epoch seconds."""
        hops: dict[str, list[float]] = {"proposal_sent": [], "to_preview_sent": [], "preview_sent_to_seen": [],
                                        "preview_to_published_sent": [], "published_sent_to_seen": []}
        for call in calls:
            preview, published = self.stamped(call, "preview"), self.stamped(call)
            seen_preview, seen_published = self.done(call, "preview"), self.done(call)
            proposal = sent.get(call)
            if proposal is not None:
                hops["proposal_sent"].append(proposal - (scheduled[call] + epoch) * 1000)
            if preview is not None and seen_preview is not None and proposal is not None:
                hops["to_preview_sent"].append(preview - proposal)
                hops["preview_sent_to_seen"].append((seen_preview + epoch) * 1000 - preview)
            if preview is not None and published is not None and seen_published is not None:
                hops["preview_to_published_sent"].append(published - preview)
                hops["published_sent_to_seen"].append((seen_published + epoch) * 1000 - published)
        return {hop: latency_summary(samples) for hop, samples in hops.items()}

    def done(self, call: str, kind: str = "published") -> float | None:
        times = self.kafka.get(candidate_of(call), {}).get(kind)
        if times is None or len(times) < BLOCKS_PER_PROPOSAL:
            return None
        return times[BLOCKS_PER_PROPOSAL - 1]


class Driver:
    """One producer, one reader of the publication topic, SSE clients, consumer-lag probes."""

    def __init__(self, settings: Settings, stack: Stack, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.stack = stack
        self.say = say
        self.arrivals = Arrivals()
        self.runtime = settings.topic(Topic.RUNTIME)
        self.publication = settings.topic(Topic.PUBLICATION)
        self.clients: list[sse.SseClient] = []
        self.token = ""
        self.open_runs: dict[str, None] = {}
        """Runs admitted and not yet completed (:meth:`complete_runs`)."""

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap, enable_idempotence=True,
                                         linger_ms=0, max_request_size=4 * 1024 * 1024)
        self.consumer = AIOKafkaConsumer(self.publication, bootstrap_servers=self.settings.kafka_bootstrap,
                                         group_id=None, auto_offset_reset="earliest", enable_auto_commit=False,
                                         max_partition_fetch_bytes=8 * 1024 * 1024,
                                         fetch_max_wait_ms=READER_FETCH_WAIT_MS)
        self.admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.kafka_bootstrap)
        await self.producer.start()
        await self.consumer.start()
        await self.admin.start()
        self.reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        for closing in (self.consumer.stop, self.producer.stop, self.admin.close):
            try:  # a broker that timed out a fetch must not cost the results already taken
                await asyncio.wait_for(closing(), 30)
            except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001
                self.say(f"  (closing a Kafka client: {type(error).__name__})")

    async def _read(self) -> None:
        kafka = self.arrivals.kafka
        while True:
            batch = await self.consumer.getmany(timeout_ms=50, max_records=5000)
            now = time.perf_counter()
            for records in batch.values():
                for record in records:
                    value = json.loads(record.value)
                    kind = value.get("type")
                    if kind in ("answer.published", "answer.preview"):
                        candidate, hop = value["block"]["candidate_id"], kind.removeprefix("answer.")
                        kafka[candidate][hop].append(now)
                        self.arrivals.stamps[candidate][hop].append(record.timestamp)
                    else:
                        self.arrivals.other[kind] += 1

    # ---------------------------------------------------------------- producing

    async def send(self, messages: Iterable[Any]) -> None:
        """Produce in order without waiting for each acknowledgement; wait for all at the end."""
        futures = []
        for message in messages:
            if isinstance(message, RunAdmitted):
                self.open_runs[message.run_id] = None
            key, value, headers = wire(message)
            futures.append(await self.producer.send(self.runtime, value, key=key, headers=headers))
        if futures:
            await asyncio.gather(*futures)

    async def admit(self, runs: list[str], sources: Sources, clients: bool = False) -> None:
        """Open every run (admission, grants) and wait until Publication has taken them
        (and, for SSE, until Delivery serves them)."""
        await self.send(m for run in runs for m in opening(run, sources))
        await self.caught_up("publication", self.runtime)
        if clients:
            await self.connect(runs)

    async def complete_runs(self, timeout: float = 900) -> int:
        """Complete every run admitted so far, as a runtime does once its answer is done,
        and wait until every part has taken the ends: a phase's runs do not stay in flight
        through the phases after it (in production a run that never ends is closed by its
        lease, X10, which the bench sets beyond its own length)."""
        runs = list(self.open_runs)
        self.close_clients()
        await self.send(closing(run) for run in runs)
        self.open_runs.clear()
        await self.quiet(timeout)
        await asyncio.sleep(1.0)  # what the Journal's relay announced of the ends (imprint.runs.v1) meanwhile
        await self.quiet(timeout)
        return len(runs)

    async def connect(self, runs: list[str], per_run: int = 1, concurrency: int = 50) -> list[sse.SseClient]:
        gate = asyncio.Semaphore(concurrency)
        host, port = self.settings.http_host, self.settings.http_port

        def on_frame(kind: str, call: str, now: float) -> None:
            if kind == "published":
                self.arrivals.sse[call].append(now)

        async def one(run: str) -> sse.SseClient:
            async with gate:
                return await sse.connect(host, port, run, self.token, on_frame, retry_for=60)

        opened = await asyncio.gather(*(one(run) for run in runs for _ in range(per_run)))
        self.clients.extend(opened)
        return list(opened)

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients = []

    # ---------------------------------------------------------------- waiting

    async def caught_up(self, consumer: str, topic: str, timeout: float = 300) -> float:
        """Wait until ``consumer``'s group has committed every offset of ``topic``; returns when."""
        group = f"{self.settings.group_prefix}.{consumer}"
        partitions = [TopicPartition(topic, p) for p in sorted(await self.producer.partitions_for(topic))]
        deadline = time.monotonic() + timeout
        while True:
            ends = await self.consumer.end_offsets(partitions)
            committed = await self.admin.list_consumer_group_offsets(group, partitions=partitions)
            behind = sum(max(0, ends[tp] - (committed[tp].offset if tp in committed and committed[tp].offset >= 0
                                            else 0)) for tp in partitions)
            if behind == 0:
                return time.perf_counter()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{consumer} still {behind} behind on {topic}")
            self.stack.check_alive()
            await asyncio.sleep(0.1)

    async def quiet(self, timeout: float = 900) -> None:
        """Wait until every consumer has committed every offset of every topic it reads, so
        a measurement starts on an idle machine, not during the previous one's backlog (the
        Journal, which reads both the runtime and the publication topic, trails a burst)."""
        for consumer, topics in QUIET.items():
            for topic in topics:
                await self.caught_up(consumer, self.settings.topic(topic), timeout)

    async def drained(self, timeout: float = 300) -> dict[str, float | None]:
        """Wait until every consumer has committed every offset of every topic it reads
        (:data:`QUIET`), watched side by side; returns when each part was seen caught up
        (``perf_counter``; the latest over its topics), ``None`` for a part still behind after
        ``timeout``. Offsets are committed at most every ``IMPRINT_OFFSET_COMMIT_SECONDS``
        (0.25 s), checked every 0.1 s: each time is late by at most about a third of a second."""
        async def one(consumer: str, topic: str) -> float | None:
            try:
                return await self.caught_up(consumer, topic, timeout)
            except TimeoutError:
                return None

        pairs = [(consumer, self.settings.topic(topic)) for consumer, topics in QUIET.items() for topic in topics]
        times = await asyncio.gather(*(one(consumer, topic) for consumer, topic in pairs))
        caught: dict[str, float | None] = {}
        for (consumer, _), at in zip(pairs, times, strict=True):
            before = caught.get(consumer, 0.0)
            caught[consumer] = None if at is None or before is None else max(before, at)
        return caught

    def pause_reader(self) -> None:
        """Stop reading the publication topic (the bench's Kafka reader is no part of the
        stack): a window measured to the SSE frame then holds only what a client's frames cost."""
        self.consumer.pause(*self.consumer.assignment())

    def resume_reader(self) -> None:
        self.consumer.resume(*self.consumer.assignment())

    async def completed(self, calls: list[str], timeout: float, kind: str = "published") -> bool:
        deadline = time.monotonic() + timeout
        pending = list(calls)
        while pending:
            pending = [c for c in pending if self.arrivals.done(c, kind) is None]
            if not pending:
                return True
            if time.monotonic() > deadline:
                return False
            self.stack.check_alive()
            await asyncio.sleep(0.05)
        return True

    # ---------------------------------------------------------------- measurements

    async def burst(self, label: str, proposals: int, per_run: int, sources: Sources,
                    delivery: bool = True, timeout: float = 600) -> dict[str, Any]:
        """``proposals`` produced at once, round-robin over runs of ``per_run``: saturation."""
        runs = [f"run-{label}-{r:05d}" for r in range(max(1, math.ceil(proposals / per_run)))]
        await self.admit(runs, sources)
        if delivery:
            await self.quiet()
        calls = [f"{label}-{i:06d}" for i in range(proposals)]
        window = self.stack.window()
        started = time.perf_counter()
        await self.send(typical_part(runs[i % len(runs)], call, sources) for i, call in enumerate(calls))
        produced = time.perf_counter()
        complete = await self.completed(calls, timeout)
        finished = max((self.arrivals.done(c) or 0.0) for c in calls)
        published_window = self.stack.close(window)
        result: dict[str, Any] = {
            "proposals": proposals, "per_run": per_run, "runs": len(runs), "complete": complete,
            "produce_seconds": round(produced - started, 3),
            "seconds": round(finished - started, 3),
            "per_s": round(proposals / (finished - started), 1) if complete else None,
            "publication_window": published_window,
        }
        if delivery:
            caught = await self.caught_up("delivery", self.publication, timeout=timeout)
            delivery_window = self.stack.close(window)
            result["delivery_seconds"] = round(caught - started, 3)
            result["delivery_per_s"] = round(proposals / (caught - started), 1)
            result["delivery_window"] = delivery_window
            cpu = delivery_window["cpu_s"]
        else:
            cpu = published_window["cpu_s"]
        result["cpu_ms_per_proposal"] = {part: round(seconds * 1000 / proposals, 3) for part, seconds in cpu.items()}
        return result

    async def whole_stack(self, label: str, proposals: int, per_run: int, sources: Sources,
                          timeout: float = 600) -> dict[str, Any]:
        """A burst read by one SSE client per run, the bench's Kafka reader paused: the whole
        stack's cost to the SSE frame. Two windows from the first produce: to the last SSE
        frame (``window``), and on until every part has caught up (``drained_window``: the
        Journal may trail the frames)."""
        runs = [f"run-{label}-{r:05d}" for r in range(max(1, math.ceil(proposals / per_run)))]
        await self.admit(runs, sources, clients=True)
        await self.quiet()
        calls = [f"{label}-{i:06d}" for i in range(proposals)]
        self.pause_reader()
        try:
            window = self.stack.window()
            started = time.perf_counter()
            await self.send(typical_part(runs[i % len(runs)], call, sources) for i, call in enumerate(calls))
            complete = await self.streamed(calls, timeout, poll=0.01)
            sse_window = self.stack.close(window)
            last = max((self.streamed_at(c) or 0.0) for c in calls)
            caught = await self.drained(timeout)
            drained_window = self.stack.close(window)
            if any(at is None for at in caught.values()):
                raise TimeoutError(f"not every part caught up within {timeout} s: {caught}")
        finally:
            self.resume_reader()
            self.close_clients()
        return {
            "proposals": proposals, "per_run": per_run, "runs": len(runs), "sse_clients": len(runs),
            "complete": complete, "seconds": round(last - started, 3),
            "per_s": round(proposals / (last - started), 1) if complete else None,
            "machine_cpu_ms_per_proposal": round(sse_window["machine_cpu_s"] * 1000 / proposals, 3),
            "stack_cpu_ms_per_proposal": round(sse_window["stack_cpu_s"] * 1000 / proposals, 3),
            "processes_cpu_ms_per_proposal": round(
                (sum(sse_window["cpu_s"].values()) + sse_window["bench_cpu_s"]) * 1000 / proposals, 3),
            "drained_seconds": round(max(at for at in caught.values() if at is not None) - started, 3),
            "drained_machine_cpu_ms_per_proposal": round(drained_window["machine_cpu_s"] * 1000 / proposals, 3),
            "cpu_ms_per_proposal": {part: round(cpu * 1000 / proposals, 3)
                                    for part, cpu in drained_window["cpu_s"].items()},
            "window": sse_window, "drained_window": drained_window,
        }

    async def paced(self, label: str, rate: float, seconds: float, runs: int, sources: Sources,
                    clients: bool, drain: float) -> dict[str, Any]:
        """Offered load ``rate`` proposals/s for ``seconds``, open loop (each proposal's clock
        starts at its scheduled time), round-robin over ``runs`` runs (admitted first; with
        ``clients``, one SSE client on each). The deadline for the last proposal is ``drain``
        seconds after its scheduled send; when everything was published by then, the window
        goes on until every part has caught up (``drain_s``, per part, after the window's
        last scheduled send). ``in_window_per_s``: proposals published while the load was
        offered, per second of it."""
        count = max(1, int(rate * seconds))
        runs = [f"run-{label}-{r:05d}" for r in range(max(1, min(runs, count)))]
        admitting = time.perf_counter()
        await self.admit(runs, sources, clients=clients)
        await self.quiet()
        admitted = time.perf_counter() - admitting
        calls = [f"{label}-{i:06d}" for i in range(count)]
        window = self.stack.window()
        scheduled, futures, late = await paced_parts(self.producer, self.runtime, calls, runs, rate, sources)
        start, last_due = scheduled[calls[0]], scheduled[calls[-1]]
        sent = {call: metadata.timestamp for call, metadata in zip(calls, await asyncio.gather(*futures))}
        complete = await self.completed(calls, max(0.0, last_due + drain - time.perf_counter()))
        if clients:  # the streams' frames follow the Kafka events; give them the same deadline
            await self.streamed(calls, max(1.0, last_due + drain - time.perf_counter()))
        ended = time.perf_counter()
        caught = await self.drained(max(30.0, drain)) if complete else {}
        window_result = self.stack.close(window)

        def latencies(kind: str) -> tuple[list[float], int]:
            """ms from the scheduled send; a proposal not seen by the deadline counts with
            the time waited so far (a lower bound), so a backlog never hides in the tail."""
            values, unfinished = [], 0
            for call in calls:
                seen = self.arrivals.done(call, kind)
                if seen is None:
                    unfinished += 1
                    seen = ended
                values.append((seen - scheduled[call]) * 1000)
            return values, unfinished

        lat_pub, unfinished = latencies("published")
        lat_pre, unfinished_preview = latencies("preview")
        published = [(scheduled[c], d) for c in calls if (d := self.arrivals.done(c)) is not None]
        result: dict[str, Any] = {
            "offered_per_s": round(rate, 1), "seconds": seconds, "proposals": count, "runs": len(runs),
            "completed": len(published), "complete": complete, "unfinished_at_deadline": unfinished,
            "deadline_s_after_last_send": drain,
            "producer_max_lateness_ms": round(late * 1000, 1),
            "preview_ms": latency_summary(lat_pre),
            "published_ms": latency_summary(lat_pub),
            "hops_ms": self.arrivals.hops(calls, scheduled, sent, time.time() - time.perf_counter()),
            "sent_per_s": round(count / max(1e-9, (max(sent.values()) - min(sent.values())) / 1000), 1)
            if count > 1 else None,
            "machine_cpu_ms_per_proposal": round(window_result["machine_cpu_s"] * 1000 / count, 3),
            "stack_cpu_ms_per_proposal": round(window_result["stack_cpu_s"] * 1000 / count, 3),
            "processes_cpu_ms_per_proposal": round(
                (sum(window_result["cpu_s"].values()) + window_result["bench_cpu_s"]) * 1000 / count, 3),
            "cpu_ms_per_proposal": {part: round(cpu * 1000 / count, 3) for part, cpu in window_result["cpu_s"].items()},
            "admit_seconds": round(admitted, 1),
            "window": window_result,
        }
        if caught:
            last_published = max(d for _, d in published)
            drain: dict[str, float | None] = {"published": round(max(0.0, last_published - last_due), 3)}
            drain.update({part: None if at is None else round(max(0.0, at - last_due), 3)
                          for part, at in caught.items()})
            result["drain_s"] = drain
            behind = [part for part, at in drain.items() if at is None]
            result["drained_s"] = None if behind else max(v for v in drain.values() if v is not None)
            if behind:
                result["still_behind"] = behind
        if count > 1:
            result["in_window_per_s"] = round(sum(1 for _, d in published if d <= last_due) / (last_due - start), 1)
        if unfinished or unfinished_preview:
            result["note"] = "unfinished proposals count with the time waited (lower bounds)"
        if published:
            finished = max(d for _, d in published)
            result["achieved_per_s"] = round(len(published) / (finished - start), 1)
            # Growing backlog ⇔ latency grows with the send time (seconds of latency per second).
            result["latency_slope"] = round(slope([s - start for s, _ in published],
                                                  [(d - s) for s, d in published]), 4)
        result["_samples"] = {"published": lat_pub, "preview": lat_pre}
        result["keeps_up"] = keeps_up(result)
        if clients:
            sse_lat, missing = [], 0
            for call in calls:
                seen = self.streamed_at(call)
                if seen is None:
                    missing += 1
                    seen = ended
                sse_lat.append((seen - scheduled[call]) * 1000)
            result["sse_ms"] = latency_summary(sse_lat)
            result["sse_unfinished_at_deadline"] = missing
            result["_samples"]["sse"] = sse_lat
            self.close_clients()
        return result

    async def streamed(self, calls: list[str], timeout: float, poll: float = 0.05) -> bool:
        """Wait until an SSE client saw both blocks of every proposal in ``calls``."""
        deadline = time.monotonic() + timeout
        pending = list(calls)
        while True:
            pending = [c for c in pending if len(self.arrivals.sse.get(c) or ()) < BLOCKS_PER_PROPOSAL]
            if not pending:
                return True
            if time.monotonic() > deadline:
                return False
            self.stack.check_alive()
            await asyncio.sleep(poll)

    def streamed_at(self, call: str) -> float | None:
        """When an SSE client saw the proposal's second block."""
        times = sorted(self.arrivals.sse.get(call) or ())
        return times[BLOCKS_PER_PROPOSAL - 1] if len(times) >= BLOCKS_PER_PROPOSAL else None

    async def fanout(self, label: str, clients: int, rate: float, seconds: float, sources: Sources,
                     drain: float) -> dict[str, Any]:
        """One run, ``clients`` concurrent SSE streams on it; proposals at ``rate``/s;
        latency from ``answer.published`` read on Kafka to each client's frame."""
        run = f"run-{label}"
        await self.admit([run], sources)
        await self.quiet()
        connect_started = time.perf_counter()
        window = self.stack.window()
        opened = await self.connect([run], per_run=clients)
        connect_seconds = time.perf_counter() - connect_started
        per_client: dict[int, dict[str, float]] = {}
        for index, client in enumerate(opened):
            seen: dict[str, float] = {}
            per_client[index] = seen

            def hook(kind: str, call: str, now: float, seen: dict[str, float] = seen) -> None:
                if kind == "published":
                    seen[call] = now  # the later of the proposal's two blocks wins

            client.on_frame = hook
        count = max(1, int(rate * seconds))
        calls = [f"{label}-{i:05d}" for i in range(count)]
        start = time.perf_counter() + 0.1
        for i, call in enumerate(calls):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.send([typical_part(run, call, sources)])
        await self.completed(calls, drain)
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            if all(len(seen) >= count for seen in per_client.values()):
                break
            await asyncio.sleep(0.1)
        result_window = self.stack.close(window)
        latencies, missing = [], 0
        for seen in per_client.values():
            for call in calls:
                published = self.arrivals.done(call)
                if call in seen and published is not None:
                    latencies.append((seen[call] - published) * 1000)
                else:
                    missing += 1
        self.close_clients()
        return {"clients": clients, "proposals": count, "offered_per_s": rate,
                "connect_seconds": round(connect_seconds, 2),
                "published_to_client_ms": latency_summary(latencies), "missing_deliveries": missing,
                "_samples": latencies,
                "window": result_window}

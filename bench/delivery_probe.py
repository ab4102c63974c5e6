"""A small probe of Delivery, over the real broker, PostgreSQL and HTTP (prints, never asserts).

Two measures, each against a fresh ``imprint serve delivery`` process started by the one
launcher (its own schema, topic prefix and state folder; optionally under ``py-spy record``):

* ``burst``: one run, N published blocks produced in a burst; how long the process takes
  to have every frame in its store (the ``/answer`` lag behind Kafka).
* ``fanout``: one run, C concurrent SSE clients; published blocks produced at a pace,
  each carrying its produce time; published → client latency over every client and
  frame, the server's peak RSS and CPU.

    .venv/bin/python -m bench.delivery_probe fanout --clients 1000 --frames 60 --rate 4
    .venv/bin/python -m bench.delivery_probe burst --blocks 2000 [--profile out.txt]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from imprint.contracts.topics import Topic
from services.common.launcher import Launcher
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.kafka import create_topics
from tests.support.postgres import drop_schema
from tests.support.delivery_builders import published, running

ROOT = Path(__file__).resolve().parent.parent
_T0 = re.compile(rb'"markdown":"t=(\d+)')


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_settings() -> Settings:
    tag = uuid.uuid4().hex[:10]
    state = Path(os.environ.get("IMPRINT_STATE_DIR") or ROOT / ".imprint")
    return Settings(
        kafka_bootstrap=os.environ.get("IMPRINT_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        database_url=os.environ.get("IMPRINT_DATABASE_URL",
                                    "postgresql://imprint:imprint@127.0.0.1:5432/imprint_test"),
        database_schema=f"probe_{tag}", topic_prefix=f"probe{tag}.", group_prefix=f"probe-{tag}",
        state_dir=state / "bench" / f"probe-{tag}", http_host="127.0.0.1", http_port=free_port(),
        log_level="WARNING", sse_client_queue=5000,
    )


@contextmanager
def probed(settings: Settings) -> Iterator[Launcher]:
    """The launcher of one measure's servers, over fresh topics; afterwards every server is
    stopped (their logs printed when the measure failed) and the schema and state folder go."""
    create_topics(settings)
    launcher = Launcher(settings, grace=30.0)
    try:
        yield launcher
    except BaseException:
        for name in launcher.children:
            print(launcher.tail(name, 3000), file=sys.stderr)
        raise
    finally:
        launcher.stop_all()
        drop_schema(settings)
        shutil.rmtree(settings.state_dir, ignore_errors=True)


class Server:
    """One ``imprint serve delivery`` child of ``launcher`` (under ``py-spy record`` with
    ``profile``), its CPU and RSS read from /proc."""

    def __init__(self, launcher: Launcher, settings: Settings, profile: str | None, name: str = "delivery") -> None:
        wrap = [str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "100", "--format", "raw",
                "--subprocesses", "-o", profile, "--"] if profile else []
        self.launcher = launcher
        self.child = launcher.start("delivery", name=name, settings=settings, wrap=wrap)
        self.url = f"http://127.0.0.1:{settings.http_port}"
        self.peak_rss = 0

    def pid(self) -> int:
        """The serving Python process (py-spy's child when profiling)."""
        return self.child.target_pid or self.child.pid

    def sample(self) -> tuple[int, float]:
        pid = self.pid()
        rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        self.peak_rss = max(self.peak_rss, rss)
        return rss, cpu

    def wait_ready(self) -> None:
        self.launcher.wait_ready([self.child.name])


async def produce_all(settings: Settings, items: list[tuple[Topic, Any]], *, pace: float = 0.0) -> None:
    from aiokafka import AIOKafkaProducer

    from imprint.contracts.registry import encode

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=2)
    await producer.start()
    try:
        futures = []
        for topic, message in items:
            value = message() if callable(message) else message
            futures.append(await producer.send(settings.topic(topic), encode(value), key=value.key.encode(),
                                               headers=[("type", value.type.encode())]))
            if pace:
                await producer.flush()
                await asyncio.sleep(pace)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def run_status(server: Server, run_id: str, token: str) -> dict[str, Any] | None:
    response = httpx.get(f"{server.url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return response.json() if response.status_code == 200 else None


def wait_frames(server: Server, run_id: str, token: str, count: int, timeout: float = 600) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        status = run_status(server, run_id, token)
        if status is not None and status["last_event_id"] >= count:
            return time.monotonic() - start
        time.sleep(0.05)
    raise RuntimeError(f"run {run_id} did not reach {count} frames")


class Group:
    """Several servers sampled as one: CPU summed, RSS of the largest."""

    def __init__(self, servers: list[Server]) -> None:
        self.servers = servers

    @property
    def peak_rss(self) -> int:
        return max(s.peak_rss for s in self.servers)

    def sample(self) -> tuple[int, float]:
        samples = [s.sample() for s in self.servers]
        return max(r for r, _ in samples), sum(c for _, c in samples)


def burst(args: argparse.Namespace) -> dict[str, Any]:
    settings = fresh_settings()
    with probed(settings) as launcher:
        server = Server(launcher, settings, args.profile)
        server.wait_ready()
        run_id, token = f"burst-{uuid.uuid4().hex[:6]}", mint_token(settings, "acct-1")
        asyncio.run(produce_all(settings, [(Topic.RUNS, running(run_id))]))
        wait_frames(server, run_id, token, 1)
        _, cpu0 = server.sample()
        items = [(Topic.PUBLICATION, published(run_id, f"b{i}", 1, f"block {i} " + "x" * 400, i))
                 for i in range(1, args.blocks + 1)]
        start = time.monotonic()
        asyncio.run(produce_all(settings, items))
        produced = time.monotonic() - start
        lag = wait_frames(server, run_id, token, 1 + args.blocks)
        _, cpu1 = server.sample()
        return {"measure": "burst", "blocks": args.blocks, "produce_seconds": round(produced, 2),
                "lag_after_produce_seconds": round(lag, 2), "total_seconds": round(produced + lag, 2),
                "server_cpu_seconds": round(cpu1 - cpu0, 2), "cpu_ms_per_block": round((cpu1 - cpu0) * 1e3 / args.blocks, 3),
                "peak_rss_mb": round(server.peak_rss / 2**20, 1)}


def wait_store(settings: Settings, runs: list[str], frames: int, timeout: float = 600) -> None:
    """Until every run has ``frames`` frames, read from the database (no load on the server)."""
    import psycopg

    assert settings.database_url is not None
    deadline = time.monotonic() + timeout
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        while time.monotonic() < deadline:
            row = connection.execute(
                f'SELECT count(*) FROM "{settings.database_schema}".delivery_runs '
                "WHERE run_id = ANY(%s) AND last_frame_id >= %s", (runs, frames)).fetchone()
            if row is not None and row[0] == len(runs):
                return
            time.sleep(0.05)
    raise RuntimeError("the store never caught up")


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    """Server CPU per block when runs hold ``size`` blocks each, the blocks of all runs interleaved."""
    out: dict[str, Any] = {"measure": "sizes", "blocks": args.blocks}
    for size in args.sizes:
        settings = fresh_settings()
        with probed(settings) as launcher:
            server = Server(launcher, settings, None)
            server.wait_ready()
            runs = [f"size{size}-{i}-{uuid.uuid4().hex[:4]}" for i in range(max(1, args.blocks // size))]
            asyncio.run(produce_all(settings, [(Topic.RUNS, running(r)) for r in runs]))
            wait_store(settings, runs, 1)
            _, cpu0 = server.sample()
            start = time.monotonic()
            items = [(Topic.PUBLICATION, published(r, f"b{i}", 1, f"block {i} " + "x" * 400, i))
                     for i in range(1, size + 1) for r in runs]
            asyncio.run(produce_all(settings, items))
            wait_store(settings, runs, 1 + size)
            elapsed = time.monotonic() - start
            _, cpu1 = server.sample()
            total = size * len(runs)
            out[f"size_{size}"] = {"runs": len(runs), "blocks": total, "seconds": round(elapsed, 2),
                                   "cpu_ms_per_block": round((cpu1 - cpu0) * 1e3 / total, 3)}
    first, last = (out[f"size_{s}"]["cpu_ms_per_block"] for s in (args.sizes[0], args.sizes[-1]))
    out["ratio_largest_to_smallest"] = round(last / first, 2) if first else None
    out["load_average"] = os.getloadavg()[0]
    return out


async def client(url: str, run_id: str, token: str, latencies: list[float], ready: asyncio.Event,
                 connected: list[int], stop: asyncio.Event, errors: list[str]) -> None:
    host, port = url.removeprefix("http://").split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write((f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                      f"Accept: text/event-stream\r\n\r\n").encode())
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            errors.append(status.decode(errors="replace"))
            return
        connected[0] += 1
        if connected[0] >= connected[1]:
            ready.set()
        while not stop.is_set():
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"data:"):
                match = _T0.search(line)
                if match:
                    latencies.append(time.time_ns() / 1e6 - int(match.group(1)) / 1e6)
        writer.close()
    except (OSError, asyncio.IncompleteReadError) as error:
        errors.append(repr(error))


def fanout(args: argparse.Namespace) -> dict[str, Any]:
    """``--instances N``: N Delivery processes sharing the store and the consumer group,
    the clients split evenly across them (CPU summed, peak RSS of the largest)."""
    settings = fresh_settings()
    with probed(settings) as launcher:
        servers = [Server(launcher, settings.model_copy(update={"http_port": free_port()}) if i else settings,
                          args.profile if i == 0 else None, name="delivery" if i == 0 else f"delivery-{i + 1}")
                   for i in range(args.instances)]
        for server in servers:
            server.wait_ready()
        run_id, token = f"fan-{uuid.uuid4().hex[:6]}", mint_token(settings, "acct-1")
        asyncio.run(produce_all(settings, [(Topic.RUNS, running(run_id))]))
        for server in servers:
            wait_frames(server, run_id, token, 1)
        return asyncio.run(_fanout(args, settings, servers, run_id, token))


async def _fanout(args: argparse.Namespace, settings: Settings, servers: list[Server], run_id: str,
                  token: str) -> dict[str, Any]:
    group = Group(servers)
    server: Any = group
    latencies: list[float] = []
    errors: list[str] = []
    ready, stop = asyncio.Event(), asyncio.Event()
    connected = [0, args.clients]
    tasks = []
    for n in range(args.clients):
        url = servers[n % len(servers)].url
        tasks.append(asyncio.create_task(client(url, run_id, token, latencies, ready, connected, stop, errors)))
        await asyncio.sleep(0.002)
    await asyncio.wait_for(ready.wait(), 120)
    await asyncio.sleep(2)
    _, cpu0 = server.sample()

    sampling = True

    async def sample() -> None:
        while sampling:
            server.sample()
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    start = time.monotonic()
    probe0 = time.process_time()

    def block(i: int) -> Any:
        return published(run_id, f"b{i}", 1, f"t={time.time_ns()} " + "x" * 300, i)

    await produce_all(settings, [(Topic.PUBLICATION, (lambda i=i: block(i))) for i in range(1, args.frames + 1)],
                      pace=1.0 / args.rate)
    expected = args.frames * args.clients
    deadline = time.monotonic() + 60
    while len(latencies) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    elapsed = time.monotonic() - start
    sampling = False
    await sampler
    _, cpu1 = server.sample()
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 1) if ordered else float("nan")

    return {"measure": "fanout", "instances": len(servers), "clients": args.clients, "frames": args.frames, "rate_per_s": args.rate,
            "received": len(latencies), "expected": expected, "errors": len(errors),
            "p50_ms": pct(0.50), "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": pct(1.0),
            "server_cpu_share": round((cpu1 - cpu0) / elapsed, 2), "peak_rss_mb": round(server.peak_rss / 2**20, 1),
            "probe_cpu_share": round((time.process_time() - probe0) / elapsed, 2),
            "load_average": os.getloadavg()[0]}


def top(args: argparse.Namespace) -> dict[str, Any]:
    """The heaviest functions of a ``py-spy record --format raw`` profile, as a share of the
    busy samples: inclusive (on the stack) and own (on top). Idle waits (selectors, thread
    pools, locks) and start-up imports are left out."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    idle = re.compile(r"^(EpollSelector.select|select|Condition.wait|wait|_worker|Queue.get|Event.wait|"
                      r"Connection.wait|_wait_for_tstate_lock|WaitGroup)\b")
    for line in Path(args.profile).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")[1:]]
        if not frames or idle.match(frames[-1]) or any("_find_and_load" in f for f in frames):
            continue
        n = int(count)
        total += n
        for name in dict.fromkeys(frames):
            inclusive[name] = inclusive.get(name, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    plumbing = re.compile(r"runpy|services/cli.py|asyncio/(runners|base_events|events|tasks)|threading.py|"
                          r"concurrent/futures|uvicorn/server.py|<module>|_asyncio|contextlib|_run_code|"
                          r"psycopg_pool/pool.py|to_thread|Context.run")
    ranked = [(k, v) for k, v in sorted(inclusive.items(), key=lambda kv: -kv[1]) if not plumbing.search(k)]
    return {"busy_samples": total,
            "inclusive": [(k, round(100 * v / total, 1)) for k, v in ranked[:args.n]],
            "self": [(k, round(100 * v / total, 1)) for k, v in sorted(own.items(), key=lambda kv: -kv[1])[:args.n]]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.delivery_probe")
    sub = parser.add_subparsers(required=True)
    b = sub.add_parser("burst")
    b.add_argument("--blocks", type=int, default=2000)
    b.add_argument("--profile")
    b.set_defaults(func=burst)
    f = sub.add_parser("fanout")
    f.add_argument("--clients", type=int, default=1000)
    f.add_argument("--frames", type=int, default=60)
    f.add_argument("--rate", type=float, default=4.0)
    f.add_argument("--instances", type=int, default=1)
    f.add_argument("--profile")
    f.set_defaults(func=fanout)
    z = sub.add_parser("sizes")
    z.add_argument("--blocks", type=int, default=4000)
    z.add_argument("--sizes", type=int, nargs="+", default=[25, 400])
    z.set_defaults(func=sizes)
    t = sub.add_parser("top")
    t.add_argument("profile")
    t.add_argument("-n", type=int, default=25)
    t.set_defaults(func=top)
    args = parser.parse_args()
    print(json.dumps(args.func(args), indent=1 if args.func is top else None))


if __name__ == "__main__":
    main()

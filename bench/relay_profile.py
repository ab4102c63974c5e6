"""``python -m bench.relay_profile``: the Publication relay at saturation, profiled, and
produce → ``answer.published`` latency under a paced load. Prints, never asserts.

1. ``saturation``: a Publication log is filled in-process (``PublicationLog.process``,
   typical two-block proposals over many runs); then the real ``imprint serve relay``
   process starts from position 0 under ``py-spy record`` (its wrapper, through the
   launcher) and relays the whole log.
   Reported: events relayed per second and the top costs of the relay process
   (py-spy samples, inclusive share, by function).
2. ``latency``: publication and relay as real processes; proposals produced at a fixed
   rate over many runs; each ``answer.published`` is matched to its proposal's produce
   time (p50/p95/p99 in ms).

Runs on its own PostgreSQL schema and topic prefix, removed afterwards. The processes'
logs and the profiles stay in ``<state>/bench/relay-<label>/``."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.__main__ import bench_settings, create_topics, delete_topics, drop_schema
from bench.stats import latency_summary
from bench.workload import admitted, grants, typical_part
from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from services.common.launcher import Launcher
from services.common.settings import Settings

RELAY_NAME = "relay→imprint.publication.v1"


@contextmanager
def scratch(settings: Settings, *, topics: bool) -> Iterator[Settings]:
    """``settings``' schema (and, with ``topics``, its topics: one partition each), removed afterwards."""
    from services.common.eventstore import ensure_schema

    ensure_schema(settings)
    if topics:
        asyncio.run(create_topics(settings, 1))
    try:
        yield settings
    finally:
        drop_schema(settings)
        if topics:
            asyncio.run(delete_topics(settings))


def launcher_for(settings: Settings, out_dir: Path) -> Launcher:
    """The launcher of one measurement's processes: they log at WARNING, like the bench's
    parts, and their logs and pid files go under ``out_dir`` (their state folder)."""
    return Launcher(settings.model_copy(update={"log_level": "WARNING", "state_dir": out_dir}))


def from_tree(tree: Path | None) -> dict[str, Any]:
    """How a part is started from another checkout of the code (a before/after comparison):
    in that folder, with it first on the path."""
    return {"env": {"PYTHONPATH": f"{tree}:{tree / 'libs'}"}, "cwd": tree} if tree is not None else {}


def fill(settings: Settings, runs: int, per_run: int) -> int:
    """Commit ``runs × per_run`` typical proposals in polls of 500; returns the last notification id."""
    from services.common.inbound import Inbound
    from services.publication.application import open_log

    app = open_log(settings)
    offset = 0

    def inbound(message: Any) -> Inbound:
        nonlocal offset
        offset += 1
        raw = encode(message)
        return Inbound(settings.topic(Topic.RUNTIME), 0, offset, message, size=len(raw), raw=raw)

    try:
        ids = [f"run-{i}" for i in range(runs)]
        messages = [inbound(m) for r in ids for m in (admitted(r), *grants(r))]
        messages += [inbound(typical_part(r, f"c-{j}")) for j in range(per_run) for r in ids]
        for start in range(0, len(messages), 500):
            app.process(messages[start:start + 500], lambda items: None)
        return app.recorder.max_notification_id() or 0
    finally:
        app.close()


def reset_relay(settings: Settings) -> None:
    """Forget the relay's position, so another relay relays the same log again from the start."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(str(settings.database_url), autocommit=True) as connection:
        connection.execute(sql.SQL("DELETE FROM {} WHERE application_name = %s").format(
            sql.Identifier(str(settings.database_schema), "publication_tracking")), (RELAY_NAME,))


def relay_position(settings: Settings) -> int:
    import psycopg
    from psycopg import sql

    with psycopg.connect(str(settings.database_url), autocommit=True) as connection:
        row = connection.execute(
            sql.SQL("SELECT max(notification_id) FROM {} WHERE application_name = %s").format(
                sql.Identifier(str(settings.database_schema), "publication_tracking")), (RELAY_NAME,)).fetchone()
    return int(row[0] or 0) if row else 0


PLUMBING = ("_bootstrap", "Thread.run", "_worker (thread.py)", "_WorkItem.run", "runpy", "(cli.py)", "run (runners.py)",
            "run_until_complete", "run_forever", "_run_once", "Handle._run", "run_until_stopped", "Runner.run",
            "_run_code", "_run_module_as_main", "to_thread", "Relay.run", "Relay._lead", "serve (")


def top_costs(raw_profile: Path, limit: int = 15) -> dict[str, list[tuple[str, float]]]:
    """The heaviest functions in py-spy's ``--format raw`` (collapsed stacks, GIL-holding
    samples): by inclusive share (skipping thread/event-loop plumbing) and by own share."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw_profile.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or "_find_and_load" in stack:  # start-up: importing modules
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            name, _, where = frame.partition(" (")
            frames.append(f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})")
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    if not total:
        return {"inclusive": [], "self": []}
    heavy = [(f, round(100 * n / total, 1)) for f, n in inclusive.most_common(400) if not any(p in f for p in PLUMBING)]
    return {"samples": total, "inclusive": heavy[:limit],  # type: ignore[dict-item]
            "self": [(f, round(100 * n / total, 1)) for f, n in own.most_common(limit)]}


def saturation(settings: Settings, last: int, out_dir: Path, label: str, tree: Path | None) -> dict[str, Any]:
    """Relay the whole (already filled) log from position 0 onto fresh topics, under py-spy."""
    reset_relay(settings)
    asyncio.run(create_topics(settings, 1))
    profile = out_dir / f"relay-saturation-{label}.raw.txt"
    name = f"relay-saturation-{label}"
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:  # `pip install py-spy` (PyPI) to profile; the rate is measured either way
        print("py-spy not installed: relaying without a profile", flush=True)
    wrap = [py_spy, "record", "--gil", "--format", "raw", "--rate", "200", "--output", str(profile), "--"] if py_spy else []
    launcher = launcher_for(settings, out_dir)
    relay = launcher.start("relay", name=name, wrap=wrap, **from_tree(tree))
    started = time.monotonic()
    first: tuple[float, int] | None = None  # the first recorded batch: start-up (imports, connections) is over
    try:
        while (position := relay_position(settings)) < last:
            if first is None and position > 0:
                first = (time.monotonic(), position)
            if relay.returncode is not None:
                raise RuntimeError(f"relay exited early: {launcher.tail(name, 2000)}")
            if time.monotonic() - started > 600:
                raise TimeoutError("relay did not catch up in 10 minutes")
            time.sleep(0.05)
        ended = time.monotonic()
        elapsed = ended - started
    finally:
        launcher.stop(name, grace=60.0)  # SIGTERM to the relay itself: py-spy then writes the profile
        asyncio.run(delete_topics(settings))
    steady = (last - first[1]) / (ended - first[0]) if first is not None and ended > first[0] else None
    return {"label": label, "notifications": last, "seconds": elapsed, "notifications_per_s": last / elapsed,
            "steady_notifications_per_s": steady,
            "top": top_costs(profile) if profile.exists() else {"inclusive": [], "self": []}, "profile": str(profile),
            "note": "notifications_per_s includes process start-up (imports, connections); steady_… is from the "
                    "first recorded batch to the end; profile shares skip start-up (import) samples"}


def latency(settings: Settings, rate: float, seconds: float, runs: int, out_dir: Path, label: str,
            tree: Path | None) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    launcher = launcher_for(settings, out_dir)
    for part in ("publication", "relay"):
        launcher.start(part, name=f"latency-{label}-{part}", **from_tree(tree))

    async def measure() -> dict[str, Any]:
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=0)
        consumer = AIOKafkaConsumer(settings.topic(Topic.PUBLICATION), bootstrap_servers=settings.kafka_bootstrap,
                                    group_id=None, auto_offset_reset="earliest", enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        sent: dict[str, float] = {}
        seen: dict[str, float] = {}
        relayed: list[float] = []
        stopping = asyncio.Event()

        async def consume() -> None:
            while not stopping.is_set():
                batch = await consumer.getmany(timeout_ms=20)
                now = time.perf_counter()
                for records in batch.values():
                    for record in records:
                        value = json.loads(record.value)
                        if value["type"] == "answer.published":
                            seen.setdefault(value["block"]["candidate_id"], now)
                            occurred = datetime.fromisoformat(value["occurred_at"]).timestamp()
                            relayed.append((time.time() - occurred) * 1000)

        async def send(run: str, message: Any) -> None:
            await producer.send(settings.topic(Topic.RUNTIME), encode(message), key=run.encode(),
                                headers=[("type", message.type.encode())])

        reader = asyncio.create_task(consume())
        try:
            ids = [f"lat-{i}" for i in range(runs)]
            for r in ids:
                for m in (admitted(r), *grants(r)):
                    await send(r, m)
            await producer.flush()
            await asyncio.sleep(3)  # admissions settle; the relay is idle and waiting
            n = int(rate * seconds)
            began = time.perf_counter()
            for i in range(n):
                due = began + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                run = ids[i % runs]
                call = f"p-{i}"
                sent[f"tool:{call}"] = time.perf_counter()
                await send(run, typical_part(run, call))
            deadline = time.monotonic() + 60
            while len(seen.keys() & sent.keys()) < len(sent) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        finally:
            stopping.set()
            await reader
            await consumer.stop()
            await producer.stop()
        latencies = [(seen[c] - t) * 1000 for c, t in sent.items() if c in seen]
        result = latency_summary(latencies)
        relay_result = latency_summary(relayed)
        return {"label": label, "offered_per_s": rate, "seconds": seconds, "sent": len(sent), "published": len(latencies),
                "published_ms": result, "event_to_published_ms": relay_result,
                "note": "published_ms: produce → answer.published read; event_to_published_ms: the committed "
                        "event's timestamp (occurred_at, taken just before its commit) → read: the relay's share"}

    try:
        launcher.wait_ready()  # both alive for a while (at WARNING they log nothing when they run)
        time.sleep(2)  # and connected to the broker
        return asyncio.run(measure())
    finally:
        launcher.stop_all(grace=20.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_profile", description=__doc__)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--per-run", type=int, default=25)
    parser.add_argument("--rates", default="100,300")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--only", choices=("saturation", "latency"), action="append")
    parser.add_argument("--trees", default="",
                        help="label=path,… : relay (and publication) processes run from these checkouts, "
                             "alternating, over the same filled log (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=2, help="saturation runs per tree, alternating")
    parser.add_argument("--label", default="run")
    args = parser.parse_args(argv)
    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")
    import logging

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    trees: list[tuple[str, Path | None]] = [(label, Path(path)) for label, path in
                                            (item.split("=", 1) for item in args.trees.split(",") if item)]
    trees = trees or [(args.label, None)]
    out_dir = Path(os.environ.get("IMPRINT_STATE_DIR", Path.cwd() / ".imprint")) / "bench" / f"relay-{args.label}"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"label": args.label, "trees": {k: str(v) for k, v in trees}, "load": os.getloadavg()}
    for part in args.only or ["saturation", "latency"]:
        if part == "saturation":
            results["saturation"] = []
            with scratch(bench_settings(uuid.uuid4().hex[:8]), topics=False) as base:
                last = fill(base, args.runs, args.per_run)
                for round_ in range(args.rounds):
                    for label, tree in trees:
                        settings = base.model_copy(update={"topic_prefix": f"{base.topic_prefix}{label}{round_}."})
                        s = saturation(settings, last, out_dir, f"{label}-{round_}", tree)
                        results["saturation"].append(s)
                        print(f"saturation [{label} #{round_}]: {s['notifications']} notifications in "
                              f"{s['seconds']:.1f} s = {s['notifications_per_s']:.0f}/s, steady "
                              f"{s['steady_notifications_per_s'] or 0:.0f}/s (load {os.getloadavg()[0]:.1f})",
                              flush=True)
                        for name, share in s["top"]["inclusive"][:10]:
                            print(f"    {share:5.1f}%  {name}", flush=True)
        else:
            results["latency"] = []
            for rate in (float(r) for r in args.rates.split(",")):
                for label, tree in trees:
                    with scratch(bench_settings(uuid.uuid4().hex[:8]), topics=True) as settings:
                        measured = latency(settings, rate, args.seconds, 50, out_dir, label, tree)
                    results["latency"].append(measured)
                    ms = measured["published_ms"]
                    print(f"latency [{label}] @ {rate:.0f}/s: {measured['published']}/{measured['sent']} published; "
                          f"p50 {ms.get('p50', 0):.1f} p95 {ms.get('p95', 0):.1f} p99 {ms.get('p99', 0):.1f} "
                          f"max {ms.get('max', 0):.1f} ms (load {os.getloadavg()[0]:.1f})", flush=True)
                    ms = measured["event_to_published_ms"]
                    print(f"   event→published (relay's share): p50 {ms.get('p50', 0):.1f} p95 {ms.get('p95', 0):.1f} "
                          f"p99 {ms.get('p99', 0):.1f} max {ms.get('max', 0):.1f} ms", flush=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"written to {out_dir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

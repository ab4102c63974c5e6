"""``python -m bench.relay_profile``: the Publication relay at saturation, profiled, and
produce → ``answer.published`` latency under a paced load. Prints, never asserts.

1. ``saturation``: a Publication log is filled in-process (``PublicationLog.process``,
   typical two-block proposals over many runs); then the real ``imprint serve relay``
   process starts from position 0 under ``py-spy record`` and relays the whole log.
   Reported: events relayed per second and the top costs of the relay process
   (py-spy samples, inclusive share, by function).
2. ``latency``: publication and relay as real processes; proposals produced at a fixed
   rate over many runs; each ``answer.published`` is matched to its proposal's produce
   time (p50/p95/p99 in ms).

Runs on its own PostgreSQL schema and topic prefix, removed afterwards."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.__main__ import admitted, bench_settings, grant_messages, scratch, stats, typical_part
from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from services.common.settings import Settings

RELAY_NAME = "relay→imprint.publication.v1"


def child_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    env.update(IMPRINT_KAFKA_BOOTSTRAP=settings.kafka_bootstrap, IMPRINT_DATABASE_URL=str(settings.database_url),
               IMPRINT_DATABASE_SCHEMA=str(settings.database_schema), IMPRINT_TOPIC_PREFIX=settings.topic_prefix,
               IMPRINT_GROUP_PREFIX=settings.group_prefix, IMPRINT_STATE_DIR=str(settings.state_dir),
               IMPRINT_LOG_LEVEL="WARNING")
    return env


def fill(settings: Settings, runs: int, per_run: int) -> int:
    """Commit ``runs × per_run`` typical proposals in polls of 500; returns the last notification id."""
    from services.common.inbound import Inbound
    from services.publication.service import open_log

    app = open_log(settings)
    offset = 0

    def inbound(message: Any) -> Inbound:
        nonlocal offset
        offset += 1
        raw = encode(message)
        return Inbound(settings.topic(Topic.RUNTIME), 0, offset, message, size=len(raw), raw=raw)

    try:
        ids = [f"run-{i}" for i in range(runs)]
        messages = [inbound(m) for r in ids for m in (admitted(r), *grant_messages(r))]
        messages += [inbound(typical_part(r, f"c-{j}")) for j in range(per_run) for r in ids]
        for start in range(0, len(messages), 500):
            app.process(messages[start:start + 500], lambda items: None)
        return app.process_recorder.max_notification_id() or 0
    finally:
        app.close()


def relay_position(settings: Settings) -> int:
    import psycopg
    from psycopg import sql

    with psycopg.connect(str(settings.database_url), autocommit=True) as connection:
        row = connection.execute(
            sql.SQL("SELECT max(notification_id) FROM {} WHERE application_name = %s").format(
                sql.Identifier(str(settings.database_schema), "publication_tracking")), (RELAY_NAME,)).fetchone()
    return int(row[0] or 0) if row else 0


def top_costs(raw_profile: Path, limit: int = 12) -> list[tuple[str, float, float]]:
    """(function, inclusive %, self %) from py-spy's ``--format raw`` (collapsed stacks)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw_profile.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    rows = [(name, 100 * n / total, 100 * own[name] / total) for name, n in inclusive.most_common(200)]
    return rows[:limit] if total else []


def saturation(settings: Settings, runs: int, per_run: int, out_dir: Path) -> dict[str, Any]:
    last = fill(settings, runs, per_run)
    profile = out_dir / "relay-saturation.raw.txt"
    log = open(out_dir / "relay-saturation.log", "ab")  # noqa: SIM115
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "--format", "raw", "--rate", "200",
                            "--output", str(profile), "--", sys.executable, "-m", "services.cli", "serve", "relay"],
                           env=child_env(settings), stdout=log, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        while relay_position(settings) < last:
            if spy.poll() is not None:
                raise RuntimeError(f"relay exited early: {(out_dir / 'relay-saturation.log').read_text()[-2000:]}")
            if time.monotonic() - started > 600:
                raise TimeoutError("relay did not catch up in 10 minutes")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        children = Path(f"/proc/{spy.pid}/task/{spy.pid}/children")
        for pid in (children.read_text().split() if children.exists() else []):
            os.kill(int(pid), signal.SIGTERM)
        spy.wait(timeout=60)
        log.close()
    return {"notifications": last, "seconds": elapsed, "notifications_per_s": last / elapsed,
            "top": top_costs(profile) if profile.exists() else [], "profile": str(profile),
            "note": "includes process start-up (imports, connections) in the elapsed time"}


def latency(settings: Settings, rate: float, seconds: float, runs: int, out_dir: Path) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    logs = {part: open(out_dir / f"latency-{part}.log", "ab") for part in ("publication", "relay")}  # noqa: SIM115
    processes = {part: subprocess.Popen([sys.executable, "-m", "services.cli", "serve", part], env=child_env(settings),
                                        stdout=logs[part], stderr=subprocess.STDOUT)
                 for part in ("publication", "relay")}

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
                for m in (admitted(r), *grant_messages(r)):
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
        ordered = sorted(latencies)
        result = stats(latencies) if latencies else {}
        if ordered:
            result["p99"] = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        committed = sorted(relayed)
        relay_result = stats(committed) if committed else {}
        if committed:
            relay_result["p99"] = committed[min(len(committed) - 1, round(0.99 * (len(committed) - 1)))]
        return {"offered_per_s": rate, "seconds": seconds, "sent": len(sent), "published": len(latencies),
                "published_ms": result, "event_to_published_ms": relay_result,
                "note": "published_ms: produce → answer.published read; event_to_published_ms: the committed "
                        "event's timestamp (occurred_at, taken just before its commit) → read: the relay's share"}

    try:
        time.sleep(4)  # both processes connected
        return asyncio.run(measure())
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for handle in logs.values():
            handle.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_profile", description=__doc__)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--per-run", type=int, default=25)
    parser.add_argument("--rates", default="100,300")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--only", choices=("saturation", "latency"), action="append")
    parser.add_argument("--label", default="run")
    args = parser.parse_args(argv)
    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")
    import logging

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    out_dir = Path(os.environ.get("IMPRINT_STATE_DIR", Path.cwd() / ".imprint")) / "bench" / f"relay-{args.label}"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"label": args.label}
    for part in args.only or ["saturation", "latency"]:
        if part == "saturation":
            with scratch(bench_settings(uuid.uuid4().hex[:8]), topics=True) as settings:
                results["saturation"] = saturation(settings, args.runs, args.per_run, out_dir)
            s = results["saturation"]
            print(f"saturation: {s['notifications']} notifications in {s['seconds']:.1f} s "
                  f"= {s['notifications_per_s']:.0f}/s")
            for name, inclusive, own in s["top"]:
                print(f"  {inclusive:5.1f}% incl  {own:5.1f}% self  {name}")
        else:
            results["latency"] = []
            for rate in (float(r) for r in args.rates.split(",")):
                with scratch(bench_settings(uuid.uuid4().hex[:8]), topics=True) as settings:
                    measured = latency(settings, rate, args.seconds, 50, out_dir)
                results["latency"].append(measured)
                ms = measured["published_ms"]
                print(f"latency @ {rate:.0f}/s: {measured['published']}/{measured['sent']} published; "
                      f"p50 {ms.get('p50', 0):.1f} p95 {ms.get('p95', 0):.1f} p99 {ms.get('p99', 0):.1f} "
                      f"max {ms.get('max', 0):.1f} ms")
                ms = measured["event_to_published_ms"]
                print(f"   event→published (relay's share): p50 {ms.get('p50', 0):.1f} p95 {ms.get('p95', 0):.1f} "
                      f"p99 {ms.get('p99', 0):.1f} max {ms.get('max', 0):.1f} ms")
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"written to {out_dir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

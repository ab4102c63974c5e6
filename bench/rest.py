"""The stack at rest: what a ready stack with no traffic and no client costs.

``imprint up``'s parts (``bench.procs.Stack``, the one launcher) are started and left ready
with nothing to do; then, over ``seconds``, from /proc: CPU (utime + stime) of each part's
process tree, of the broker and of PostgreSQL (every process of each: a shared server's
other users are in its figure), in % of one core. Beside them, counted on our side of the
sockets (``ss``): the TCP segments carrying data that the parts sent to the broker and to
PostgreSQL per second (one request is usually one segment), and PostgreSQL's committed
transactions in the stack's database (``pg_stat_database``; other users of that database
count too). The broker's and PostgreSQL's own idle work (a KRaft controller, a log cleaner,
autovacuum) is measured first, over the same length, before the stack starts: its floor.
The stack's figure is its parts plus what the broker and PostgreSQL spent above their
floors.

    .venv/bin/python -m bench.rest --seconds 30        # its own schema and topic prefix
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from bench.procs import TICKS, cpu_seconds
from services.common.launcher import child_pids

REST_BOUND_PERCENT = 2.0
"""Issue target: the whole stack (parts, relays, broker, PostgreSQL) at rest uses at most
this much of one core."""


def tree(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(child_pids(current))
    return found


def tree_cpu(pid: int) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in tree(pid))


def _port(address: str) -> int:
    return int(urlsplit(f"//{address}").port or 0)


def listening_pid(port: int) -> int | None:
    """The process listening on ``port`` on this machine (the broker, PostgreSQL's postmaster)."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    match = re.search(r"pid=(\d+)", out)
    return int(match.group(1)) if match else None


def sent_segments(pids: Iterable[int], port: int) -> int:
    """TCP segments carrying data that ``pids`` (and their children) sent to ``port``,
    summed over their open connections (``ss -i``'s ``data_segs_out``)."""
    wanted = {str(p) for pid in pids for p in tree(pid)}
    out = subprocess.run(["ss", "-Htinp", f"dport = :{port}"], capture_output=True, text=True).stdout
    total = 0
    lines = out.splitlines()
    for index, line in enumerate(lines):
        owners = set(re.findall(r"pid=(\d+)", line))
        if not owners & wanted:
            continue
        detail = lines[index + 1] if index + 1 < len(lines) and "pid=" not in lines[index + 1] else line
        match = re.search(r"data_segs_out:(\d+)", detail) or re.search(r"data_segs_out:(\d+)", line)
        if match:
            total += int(match.group(1))
    return total


def committed(database_url: str | None) -> int | None:
    """Transactions committed so far in the stack's database (every user of it)."""
    if not database_url or not database_url.startswith("postgres"):
        return None
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                                 ).fetchone()
    return int(row[0]) if row else None


def _percent(seconds: float, window: float) -> float:
    return round(100.0 * seconds / window, 2) if window > 0 else 0.0


def sample(settings: Any, parts: dict[str, int], seconds: float) -> dict[str, Any]:
    """CPU of each part's tree, the broker's and PostgreSQL's (``None`` where that server
    is not on this machine), requests sent and transactions committed, over ``seconds``."""
    kafka_port = _port(settings.kafka_bootstrap.split(",")[0])
    pg_port = _port(urlsplit(settings.database_url).netloc.rsplit("@", 1)[-1]) if settings.database_url else 0
    servers = {"broker": listening_pid(kafka_port), "postgresql": listening_pid(pg_port) if pg_port else None}
    before = {name: tree_cpu(pid) for name, pid in parts.items()}
    before.update({name: tree_cpu(pid) for name, pid in servers.items() if pid})
    segments = {"broker": sent_segments(parts.values(), kafka_port),
                "postgresql": sent_segments(parts.values(), pg_port) if pg_port else 0}
    transactions = committed(settings.database_url)
    started = time.monotonic()
    time.sleep(seconds)
    window = time.monotonic() - started
    after = {name: tree_cpu(pid) for name, pid in parts.items()}
    after.update({name: tree_cpu(pid) for name, pid in servers.items() if pid})
    out: dict[str, Any] = {
        "seconds": round(window, 1),
        "percent_of_core": {name: _percent(after[name] - before[name], window) for name in before},
        "segments_per_s": {
            "broker": round((sent_segments(parts.values(), kafka_port) - segments["broker"]) / window, 2),
            "postgresql": round((sent_segments(parts.values(), pg_port) - segments["postgresql"]) / window, 2)
            if pg_port else None},
    }
    if transactions is not None:
        later = committed(settings.database_url)
        out["transactions_per_s"] = round(((later or 0) - transactions - 2) / window, 2)  # our own two reads
    return out


def floor(settings: Any, seconds: float) -> dict[str, Any]:
    """The broker's and PostgreSQL's CPU with no part running (their own idle work, and
    whatever else uses a shared server meanwhile), in % of one core, and the transactions
    committed meanwhile in the stack's database."""
    alone = sample(settings, {}, seconds)
    return {**alone["percent_of_core"], "transactions_per_s": alone.get("transactions_per_s")}


def measure(settings: Any, stack: Any, seconds: float, say: Callable[[str], None],
            settle: float = 5.0, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The floor first (``base``: measured already, before ``stack`` started), then the
    ready stack at rest."""
    if base is None:
        say(f"rest: the broker and PostgreSQL alone for {seconds:.0f} s (their floor)")
        base = floor(settings, seconds)
    if not stack.pids():
        stack.start()
    stack.wait_ready()
    time.sleep(settle)  # the consumer groups' first joins and the relays' first reads
    say(f"rest: the stack ready, no traffic and no client, for {seconds:.0f} s")
    at_rest = sample(settings, stack.pids(), seconds)
    cpu = at_rest["percent_of_core"]
    parts = {name: value for name, value in cpu.items() if name not in ("broker", "postgresql")}
    caused = {name: round(max(0.0, cpu[name] - base.get(name, 0.0)), 2)
              for name in ("broker", "postgresql") if name in cpu}
    result = {**at_rest, "floor_percent_of_core": base, "servers_above_floor": caused,
              "parts_percent": round(sum(parts.values()), 2),
              "stack_percent": round(sum(parts.values()) + sum(caused.values()), 2),
              "ticks_per_s": TICKS}
    say(f"  parts {parts} (sum {result['parts_percent']} %); broker {cpu.get('broker')} % (floor "
        f"{base.get('broker')} %), PostgreSQL {cpu.get('postgresql')} % (floor {base.get('postgresql')} %); "
        f"stack {result['stack_percent']} % of one core; sent/s {at_rest['segments_per_s']}, "
        f"transactions/s {at_rest.get('transactions_per_s')}")
    return result


PROBE_GAP_SECONDS = 2.5
"""Quiet before each probe proposal: past a consumer's long poll
(``services.common.subscription.LONG_POLL_MS``) and any gathering window answered empty, so
each one meets a stack at rest."""


async def probe(driver: Any, proposals: int, say: Callable[[str], None], gap: float = PROBE_GAP_SECONDS
                ) -> dict[str, Any]:
    """``proposals`` single proposals into one run with one SSE client, each after ``gap`` seconds
    of quiet: produce → ``answer.preview`` and → ``answer.published`` seen on Kafka, and → the
    SSE frame, in ms (the first proposal's too: nothing warms the stack for it)."""
    import asyncio

    from bench.stats import latency_summary
    from bench.workload import Sources, typical_part

    run = "run-rest-probe"
    await driver.admit([run], Sources(), clients=True)
    hops: dict[str, list[float]] = {"preview": [], "published": [], "sse": [], "preview_to_published_sent": []}
    for index in range(proposals):
        await asyncio.sleep(gap)
        call = f"rest-probe-{index:03d}"
        sent = time.perf_counter()
        await driver.send([typical_part(run, call, Sources())])
        if not await driver.completed([call], 30) or not await driver.streamed([call], 30):
            raise RuntimeError(f"probe proposal {call} was not published and streamed within 30 s")
        hops["preview"].append((driver.arrivals.done(call, "preview") - sent) * 1000)
        hops["published"].append((driver.arrivals.done(call) - sent) * 1000)
        hops["sse"].append((driver.streamed_at(call) - sent) * 1000)
        preview, published = driver.arrivals.stamped(call, "preview"), driver.arrivals.stamped(call)
        if preview is not None and published is not None:  # Publication's commit and its relay
            hops["preview_to_published_sent"].append(float(published - preview))
    out = {"proposals": proposals, "gap_s": gap, **{hop: latency_summary(values) for hop, values in hops.items()}}
    say(f"  one proposal into a stack at rest (×{proposals}): produce → preview {out['preview']}, → published "
        f"{out['published']}, → SSE {out['sse']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rest", description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between ready and the window")
    parser.add_argument("--probe", type=int, default=0, help="then this many single proposals, each after a quiet spell")
    args = parser.parse_args(argv)

    import asyncio
    import shutil
    import uuid

    from bench.__main__ import PARTS, bench_settings, create_topics, delete_topics, drop_schema, say
    from bench.procs import Stack
    from services.common.backends import backend_for
    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")
    settings = bench_settings(uuid.uuid4().hex[:8])
    backend_for(settings).prepare()
    asyncio.run(create_topics(settings, int(os.environ.get("KAFKA_TOPIC_PARTITIONS", "3"))))
    stack = Stack(settings, PARTS)
    try:
        out = {"rest": measure(settings, stack, args.seconds, say, args.settle)}
        if args.probe:
            out["probe"] = asyncio.run(_probe(settings, stack, args.probe))
        print(json.dumps(out, indent=1))
    finally:
        stack.stop()
        asyncio.run(delete_topics(settings))
        drop_schema(settings)
        shutil.rmtree(settings.state_dir, ignore_errors=True)
    return 0


async def _probe(settings: Any, stack: Any, proposals: int) -> dict[str, Any]:
    from bench.__main__ import mint_token, say
    from bench.e2e import Driver

    driver = Driver(settings, stack, say)
    driver.token = mint_token(settings)
    await driver.start()
    try:
        return await probe(driver, proposals, say)
    finally:
        await driver.stop()


if __name__ == "__main__":
    raise SystemExit(main())

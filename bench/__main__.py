"""``python -m bench [--quick] [--label NAME] [--only …]``: see ``bench/README.md``.

A run writes ``bench/results/latest.{json,md}`` and ``latest-*.png`` (overwritten) and, when it
finishes, appends one line to ``bench/results/history.jsonl``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PARTS = ("publication", "journal", "delivery")
"""What ``imprint up`` runs (``services.common.launcher.PARTS``): Publication relays its own log."""
DEFAULT_DATABASE_URL = "postgresql://imprint:imprint@127.0.0.1:5432/imprint"
E2E_PHASES = ("rest", "cost", "instances", "cpu", "age", "fanout", "latency", "sustained", "many_runs", "memory",
              "overload", "peer")
"""The end-to-end phases (``bench.phases.RUNNERS``), in the order they run."""
CONSUMER_FLOOR_TOPICS = ("bench.floor.in", "bench.floor.out")
"""The consumer floor's topics: as many partitions as imprint's own."""


@dataclass(frozen=True)
class Plan:
    """Sizes of every measurement (``--quick`` fits in 4 minutes, the full run in ~25).
    Loads are fractions of the burst saturation measured in the same run."""

    transport_rates: tuple[int, ...] = (100, 300, 1000)
    transport_seconds: float = 5
    transport_burst: int = 5000
    commit_count: int = 3000
    consumer_floor_rates: tuple[int, ...] = (100, 300, 1000)
    consumer_floor_seconds: float = 10
    naive_sizes: tuple[int, ...] = (25, 100, 400)
    naive_proposals: int = 800
    run_sizes: tuple[int, ...] = (25, 100, 400)
    run_size_proposals: int = 2000
    rounds: int = 3
    """Rounds of the bursts compared with each other (run sizes; fresh and aged source) and of
    the whole stack's CPU burst, interleaved; each figure is the median of its rounds."""
    earlier_runs: int = 10_000
    age_proposals: int = 1000
    stack_cpu_proposals: int = 2000
    """The whole stack's CPU burst (runs of 25, one SSE client per run)."""
    rest_seconds: float = 30
    """The stack at rest (``bench.rest``): the broker's and PostgreSQL's floor, then the stack, this long each."""
    rest_probes: int = 10
    latency_loads: tuple[float, ...] = (0.05, 0.3)
    latency_seconds: float = 30
    latency_runs: int = 100
    """Runs the latency loads are spread over, one SSE client on each."""
    ladder: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    """The paced ladder's offered loads, up to the first that does not keep up."""
    step_seconds: float = 10
    many_runs: tuple[int, ...] = (200, 5000)
    """Runs in flight of the many-runs load: the target compares the last with the first."""
    many_runs_per_run: int = 3
    """Proposals per run over the most runs (the same proposals over the fewer runs)."""
    many_runs_load: float = 0.5
    many_runs_rounds: int = 2
    """Rounds of the many-runs shapes, interleaved (2: the 5,000 runs' admission and drain are long)."""
    memory_runs: int = 20_000
    """Runs in flight of the memory phase (``bench.memory``), each of ``memory_per_run`` proposals."""
    memory_per_run: int = 4
    memory_load: float = 0.5
    overload_load: float = 1.2
    overload_seconds: float = 60
    drain_timeout: float = 300
    """How long after its window the bench waits for a many-runs or overload backlog to drain
    (for the last publication, then as long again for the parts); past it, "not drained"."""
    fanout_clients: int = 1000
    fanout_rate: float = 4
    fanout_seconds: float = 15
    profile_seconds: float = 15
    replay_sizes: tuple[int, ...] = (250_000, 1_000_000)
    replay_rss_limit_mb: int = 12_000
    replay_timeout: float = 400
    pinned_burst_per_s: float = 0
    """Set every offered load against this rate instead of the burst saturation the run
    measures (0: measured). For comparing two builds at the same offered rates: each run's own
    burst moves with the machine, and CPU per proposal at a paced load moves with the rate. The
    burst is still measured and reported; only the loads derived from it are pinned."""


QUICK = Plan(rest_seconds=10, rest_probes=3, rounds=1, transport_seconds=2, transport_burst=2000, commit_count=1000, consumer_floor_seconds=2,
             naive_sizes=(25,), naive_proposals=250, run_size_proposals=400, earlier_runs=300, age_proposals=300,
             stack_cpu_proposals=500, latency_seconds=6, latency_runs=50, ladder=(0.4, 0.8), step_seconds=3,
             many_runs=(20, 500), many_runs_per_run=2, many_runs_rounds=1, memory_runs=2000, overload_seconds=10,
             drain_timeout=120, fanout_clients=300, fanout_rate=3, fanout_seconds=4, profile_seconds=6,
             replay_sizes=(10_000, 40_000), replay_rss_limit_mb=6000, replay_timeout=120)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BENCH_RUN_LEASE_SECONDS = 24 * 3600.0
"""The bench's runs never complete (each phase admits its runs, proposes and moves on), so
with the default lease (X10) the Journal would close every run of a phase as
``runtime_lost`` two minutes later, in the middle of a later phase's measurement. A lease
longer than the bench keeps each phase's work its own."""


def bench_settings(tag: str) -> Any:
    from services.common.settings import Settings

    state = Path(os.environ.get("IMPRINT_STATE_DIR") or ROOT / ".imprint")
    return Settings(
        kafka_bootstrap=os.environ.get("IMPRINT_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        database_url=os.environ.get("IMPRINT_DATABASE_URL") or DEFAULT_DATABASE_URL,
        database_schema=f"bench_{tag}", topic_prefix=f"bench{tag}.", group_prefix=f"imprint-bench-{tag}",
        state_dir=state / "bench" / tag, http_host="127.0.0.1", http_port=free_port(),
        run_lease_seconds=BENCH_RUN_LEASE_SECONDS,
    )


async def create_topics(settings: Any, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from imprint.contracts.topics import Topic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(settings.topic(t), num_partitions=partitions, replication_factor=1)
                                   for t in Topic] + [NewTopic(settings.topic("bench.transport"), 1, 1)]
                                  + [NewTopic(settings.topic(t), num_partitions=partitions, replication_factor=1)
                                     for t in CONSUMER_FLOOR_TOPICS])
    finally:
        await admin.close()


async def delete_topics(settings: Any) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    from imprint.contracts.topics import Topic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic(t) for t in Topic] + [settings.topic("bench.transport")]
                                  + [settings.topic(t) for t in CONSUMER_FLOOR_TOPICS])
    except Exception:  # noqa: BLE001 — cleanup only
        pass
    finally:
        await admin.close()


def drop_schema(settings: Any) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.database_schema)))


def mint_token(settings: Any) -> str:
    """Through the CLI (``imprint token``), like an operator would."""
    from bench.workload import ACCOUNT
    from services.common.launcher import child_environment

    out = subprocess.run([sys.executable, "-m", "services.cli", "token", "--account", ACCOUNT],
                         env=child_environment(settings), capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = 0.0
    try:
        memory = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "memory_gb": round(memory, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg_before": " ".join(Path("/proc/loadavg").read_text().split()[:3])}


def versions(settings: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for package in ("eventsourcing", "aiokafka", "faststream", "psycopg", "pydantic", "fastapi", "uvicorn",
                    "starlette", "cryptography"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        import psycopg

        with psycopg.connect(settings.database_url) as connection:
            found["postgresql"] = str(connection.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    except Exception:  # noqa: BLE001
        pass
    libs = Path(os.environ.get("IMPRINT_STATE_DIR") or ROOT / ".imprint") / "kafka" / "libs"
    jars = sorted(libs.glob("kafka_2.13-*.jar")) if libs.exists() else []
    if jars:
        found["kafka"] = jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar")
    return found


def code() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"commit": git("rev-parse", "--short", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "system_commit": git("log", "-1", "--format=%h %s", "--", "libs", "services"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "libs", "services"))}


# ------------------------------------------------------------------------------ phases


def run_floors(settings: Any, plan: Plan, results: dict[str, Any], samples: dict[str, list[float]]) -> None:
    from bench import floors

    say("transport floor: raw aiokafka produce → consume")
    transport = asyncio.run(floors.transport_floor(settings, settings.topic("bench.transport"),
                                                   plan.transport_rates, plan.transport_seconds,
                                                   plan.transport_burst))
    for rate, row in transport["paced"].items():
        raw = row.pop("_samples", None)
        if raw and rate == "300":
            samples["transport floor @300/s"] = raw
    results["floors"]["transport"] = transport
    say(f"  {transport['paced']}  burst {transport['burst']['per_s']:,}/s")
    say("commit floor: INSERT + COMMIT per proposal")
    results["floors"]["commit"] = floors.commit_floor(settings, plan.commit_count)
    say(f"  {results['floors']['commit']['per_s']:,}/s")
    say("consumer floor: poll, one transaction per poll, one produce per record (a bare process)")
    results["floors"]["consumer"] = asyncio.run(floors.consumer_floor(
        settings, *(settings.topic(t) for t in CONSUMER_FLOOR_TOPICS), plan.consumer_floor_rates,
        plan.consumer_floor_seconds))
    say("  " + "  ".join(f"{rate}/s: {row['cores']} cores, {row['cpu_ms_per_message']} ms/message, p99 {row['p99']} ms"
                         for rate, row in results["floors"]["consumer"]["paced"].items()))
    say("naive peer: eventsourcing get + trigger + save per proposal")
    results["floors"]["naive"] = floors.naive_peer(settings, plan.naive_sizes, plan.naive_proposals)
    say(f"  {results['floors']['naive']['per_run_size']}")


async def run_e2e(settings: Any, stack: Any, plan: Plan, results: dict[str, Any], samples: dict[str, list[float]],
                  profile_dir: Path | None, selected: tuple[str, ...], errors: dict[str, str],
                  checkpoint: Any) -> None:
    from bench import phases
    from bench.e2e import Driver

    from bench import rest

    at_rest = "rest" in selected
    if at_rest:  # before any client of the bench connects
        results["e2e"]["rest"] = await asyncio.to_thread(rest.measure, settings, stack, plan.rest_seconds, say,
                                                         base=results["e2e"].pop("rest_floor", None))
        checkpoint()
    driver = Driver(settings, stack, say)
    driver.token = mint_token(settings)
    await driver.start()
    try:
        if at_rest:
            results["e2e"]["rest"]["probe"] = await rest.probe(driver, plan.rest_probes, say)
        if any(phase != "rest" for phase in selected):
            await phases.run(phases.Context(settings, stack, plan, driver, results, samples, say, profile_dir),
                             tuple(phase for phase in selected if phase != "rest"), errors, checkpoint)
    finally:
        await driver.stop()


# ------------------------------------------------------------------------------ main


def _stop_on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through the finally blocks that stop the stack by pid


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop_on_term)
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: the whole run in under 4 minutes")
    parser.add_argument("--only", choices=("floors", "e2e", "replay", "rule_timings", *E2E_PHASES), action="append",
                        help="run these sections only (repeatable); e2e runs every phase of the stack, "
                             "a phase's name only that one (after a burst that sets the loads)")
    parser.add_argument("--label", default=None,
                        help="a name for this run, kept in latest.json and its history line (e.g. before, after)")
    parser.add_argument("--profile", action="store_true", help="py-spy every part at saturation (top five costs)")
    parser.add_argument("--partitions", type=int, default=int(os.environ.get("KAFKA_TOPIC_PARTITIONS", "3")),
                        help="partitions per topic (deploy/local default: 3)")
    parser.add_argument("--rebuild-log", action="store_true", help="rebuild the cached replay logs")
    parser.add_argument("--reuse-log", action="store_true",
                        help="replay the cached logs even when other Publication code wrote them (recorded)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override one size of the plan, e.g. --set earlier_runs=2000 (recorded in the results)")
    args = parser.parse_args(argv)

    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")
    import logging

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    from bench import report
    from bench.procs import Stack

    plan = QUICK if args.quick else Plan()
    overrides: dict[str, Any] = {}
    for item in args.set:
        name, _, text = item.partition("=")
        current = getattr(plan, name)
        def number(value: str) -> int | float:
            return float(value) if "." in value else int(value)

        overrides[name] = (tuple(number(v) for v in text.split(",")) if isinstance(current, tuple)
                           else number(text))
    if overrides:
        plan = dataclasses.replace(plan, **overrides)
    parts = args.only or ["floors", "e2e", "replay", *([] if args.quick else ["rule_timings"])]  # rule_timings: ~80 s
    selected = E2E_PHASES if "e2e" in parts else tuple(p for p in E2E_PHASES if p in parts)
    tag = uuid.uuid4().hex[:8]
    settings = bench_settings(tag)
    started = time.monotonic()
    results: dict[str, Any] = {
        "label": args.label, "mode": "quick" if args.quick else "full",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
        "versions": versions(settings), "code": code(), "plan": plan.__dict__, "plan_overrides": overrides,
        "partitions": args.partitions,
        "floors": {}, "e2e": {}, "windows": {}, "profiles": {}, "seconds": {},
    }
    samples: dict[str, list[float]] = {}
    errors: dict[str, str] = {}

    def checkpoint() -> None:
        """Write what is measured so far: a run stopped half-way still leaves its results."""
        results["machine"]["loadavg_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if errors:
            results["errors"] = errors
        results["targets"] = report.targets(results)
        results["samples"] = {k: [round(v, 3) for v in vs] for k, vs in samples.items()}
        write(results, args.out, quiet=True)

    profile_dir = (args.out / "profiles" / "latest") if args.profile else None
    from services.common.backends import backend_for

    backend_for(settings).prepare()
    asyncio.run(create_topics(settings, args.partitions))
    try:
        if "floors" in parts:
            phase = time.monotonic()
            try:
                run_floors(settings, plan, results, samples)
            except Exception as error:  # noqa: BLE001 — report what failed and go on
                errors["floors"] = f"{type(error).__name__}: {error}"
            results["seconds"]["floors"] = round(time.monotonic() - phase, 1)
            checkpoint()
        if selected:
            phase = time.monotonic()
            if "rest" in selected:  # the broker's and PostgreSQL's own idle work, before the stack starts
                from bench.rest import floor

                say(f"rest: the broker and PostgreSQL alone for {plan.rest_seconds:.0f} s (their floor)")
                results["e2e"]["rest_floor"] = floor(settings, plan.rest_seconds)
            stack = Stack(settings, PARTS)
            say(f"starting {', '.join(PARTS)} (schema {settings.database_schema}, prefix {settings.topic_prefix})")
            stack.start()
            try:
                asyncio.run(run_e2e(settings, stack, plan, results, samples, profile_dir, selected, errors,
                                    checkpoint))
            except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001
                import traceback

                errors["e2e"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
                for part in PARTS:
                    tail = stack.log(part)[-1500:]
                    if "Traceback" in tail or "error" in tail.lower():
                        print(f"----- {part} log (tail) -----\n{tail}", file=sys.stderr)
            finally:
                stack.stop()
            results["seconds"]["e2e"] = round(time.monotonic() - phase, 1)
            checkpoint()
        if "rule_timings" in parts:  # the rules that carry a time (bench/rule_timings.py)
            from bench import rule_timings

            phase = time.monotonic()
            rule_timings.section(settings, results, errors, say)
            results["seconds"]["rule_timings"] = round(time.monotonic() - phase, 1)
            checkpoint()
    finally:
        asyncio.run(delete_topics(settings))
        drop_schema(settings)
        shutil.rmtree(settings.state_dir, ignore_errors=True)
    if "replay" in parts:
        phase = time.monotonic()
        from bench.replay import bench_replay

        try:
            say(f"replay over logs of {', '.join(f'{s:,}' for s in plan.replay_sizes)} events")
            results["replay"] = bench_replay(settings, plan.replay_sizes, args.rebuild_log, plan.replay_rss_limit_mb,
                                             plan.replay_timeout, say, reuse=args.reuse_log)
        except Exception as error:  # noqa: BLE001
            errors["replay"] = f"{type(error).__name__}: {error}"
        finally:
            shutil.rmtree(settings.state_dir, ignore_errors=True)  # the replay's log (its tail is in the results)
        results["seconds"]["replay"] = round(time.monotonic() - phase, 1)
    results["seconds"]["total"] = round(time.monotonic() - started, 1)
    results["machine"]["loadavg_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    if errors:
        results["errors"] = errors
    results["targets"] = report.targets(results)
    results["samples"] = {k: [round(v, 3) for v in vs] for k, vs in samples.items()}
    write(results, args.out, final=True)
    print(report.markdown(results))
    return 1 if errors else 0


def write(results: dict[str, Any], out: Path, *, final: bool = False, quiet: bool = False) -> None:
    """Overwrite ``latest.json``, ``latest.md`` and the ``latest-*.png`` plots; a finished run
    (``final``) also appends its line to the history file. A checkpoint only overwrites, so a
    run stopped half-way leaves what it measured in ``latest.*`` and no history line."""
    from bench import report

    out.mkdir(parents=True, exist_ok=True)
    prefix = out / "latest"
    prefix.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    prefix.with_suffix(".md").write_text(report.markdown(results))
    try:
        report.plots(results, prefix)
    except Exception as error:  # noqa: BLE001 — plots are a convenience; the JSON is the record
        say(f"plots failed: {type(error).__name__}: {error}")
    if final:
        report.append_history(results, out)
    if not quiet:
        say(f"results written to {prefix}.{{json,md}} and {prefix}-*.png"
            + (f"; one line appended to {out / report.HISTORY}" if final else ""))


if __name__ == "__main__":
    sys.exit(main())

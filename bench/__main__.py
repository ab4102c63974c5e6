"""Run the Publication benchmarks (see ``bench/__init__.py``). Prints, never asserts."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imprint.contracts.registry import encode
from imprint.contracts.runtime import AnswerPart, QuestionConditionSet, RunAdmitted
from imprint.contracts.topics import Topic
from imprint.publication import (
    DEFAULT_POLICY,
    Candidate,
    PublicationRun,
    SourceFacts,
    SourceStanding,
    intake,
    settle,
)
from services.common.settings import Settings

DEFAULT_DATABASE_URL = "postgresql://imprint:imprint@127.0.0.1:5432/imprint"
ACCOUNT = "acct-bench"
SOURCE = "src:public:annual-report-2024"
PRIVATE = "src:private:acct-bench:memo"


# ------------------------------------------------------------------------------ inputs


def typical_part(run_id: str, call: str) -> AnswerPart:
    """Two blocks, as a research answer usually sends them: a cited paragraph with a
    Host-issued number, and a short cited follow-up (about 600 characters in all)."""
    first = f"({call}) " + (
        "Revenue grew in every region in 2024, led by the services segment, while hardware "
        f"margins narrowed under pricing pressure [[cite:{SOURCE}]]. The services share of total "
        "revenue reached [[num:h-share]], up from the previous year; management attributes the "
        "change to subscription renewals and the new enterprise tier. "
    ) * 2
    second = (f"({call}) The memo adds that the guidance for next year assumes flat hardware volumes "
              f"[[cite:{PRIVATE}]].")
    return AnswerPart(run_id=run_id, turn_id="turn-1", tool_call_id=call, sealed=True,
                      arguments={"blocks": [{"markdown": first}, {"markdown": second, "role": "detail"}]})


def admitted(run_id: str) -> RunAdmitted:
    return RunAdmitted(run_id=run_id, account_id=ACCOUNT, conversation_id=f"conv-{run_id}",
                       message_id=f"msg-{run_id}", question="How did revenue develop?",
                       qcs=QuestionConditionSet(qcs_id=f"qcs-{run_id}"))


def grant_messages(run_id: str) -> list[Any]:
    from imprint.contracts.runtime import EvidenceGranted, NumericIssued

    return [
        EvidenceGranted(run_id=run_id, source_id=SOURCE, scope="public", owner_account_id="publisher", title="AR"),
        EvidenceGranted(run_id=run_id, source_id=PRIVATE, scope="private", owner_account_id=ACCOUNT, title="Memo"),
        NumericIssued(run_id=run_id, handle_id="h-share", value="41.5", unit="%", version=1, source_id=SOURCE),  # type: ignore[arg-type]
    ]


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {"n": len(ordered), "mean": statistics.fmean(ordered), "p50": pct(0.5), "p95": pct(0.95),
            "min": ordered[0], "max": ordered[-1]}


# ------------------------------------------------------------------------------ 1. core


def bench_core() -> dict[str, Any]:
    standing = SourceStanding.of(
        SourceFacts(SOURCE, registered=True, scope="public", owner_account_id="publisher"),
        SourceFacts(PRIVATE, registered=True, scope="private", owner_account_id=ACCOUNT),
    )
    results: dict[str, Any] = {}
    for existing in (0, 50):
        run = PublicationRun("run-core")
        run.note_admission(ACCOUNT, "conv-core")
        run.grant_evidence(SOURCE, "public", "publisher", "AR")
        run.grant_evidence(PRIVATE, "private", ACCOUNT, "Memo")
        run.issue_numeric("h-share", "41.5", "%", 1, SOURCE)
        for i in range(existing // 2):  # each typical proposal commits two blocks
            candidate = intake(typical_part("run-core", f"seed-{i}"))
            assert isinstance(candidate, Candidate)
            run.settle(candidate, standing)
        run.collect_events()
        proposal = intake(typical_part("run-core", "measured"))
        assert isinstance(proposal, Candidate)
        facts = run.facts()
        timer = timeit.Timer(lambda: settle(proposal, facts, standing, DEFAULT_POLICY))
        number, _ = timer.autorange()
        runs = [t / number * 1e6 for t in timer.repeat(repeat=7, number=number)]
        results[f"settle_us_{existing}_blocks"] = {"best": min(runs), "median": statistics.median(runs),
                                                   "calls_per_repeat": number}
        raw = encode(typical_part("run-core", "measured"))
        from imprint.contracts.registry import decode

        def intake_and_settle() -> None:
            candidate = intake(decode(Topic.RUNTIME, raw), envelope_size=len(raw))
            assert isinstance(candidate, Candidate)
            settle(candidate, run.facts(), standing, DEFAULT_POLICY)

        timer = timeit.Timer(intake_and_settle)
        number, _ = timer.autorange()
        runs = [t / number * 1e6 for t in timer.repeat(repeat=7, number=number)]
        results[f"decode_intake_settle_us_{existing}_blocks"] = {"best": min(runs), "median": statistics.median(runs)}
    return results


# ------------------------------------------------------------------------------ infrastructure


def bench_settings(tag: str) -> Settings:
    state = Path(os.environ.get("IMPRINT_STATE_DIR", Path.cwd() / ".imprint"))
    return Settings(
        kafka_bootstrap=os.environ.get("IMPRINT_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        database_url=os.environ.get("IMPRINT_DATABASE_URL") or DEFAULT_DATABASE_URL,
        database_schema=f"bench_{tag}",
        topic_prefix=f"bench{tag}.",
        group_prefix=f"imprint-bench-{tag}",
        state_dir=state / "bench" / tag,
    )


@contextmanager
def scratch(settings: Settings, *, topics: bool) -> Iterator[Settings]:
    from services.common.eventstore import ensure_schema

    ensure_schema(settings)
    if topics:
        asyncio.run(create_topics(settings))
    try:
        yield settings
    finally:
        import psycopg
        from psycopg import sql

        with psycopg.connect(settings.database_url, autocommit=True) as connection:  # type: ignore[arg-type]
            connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.database_schema)))
        if topics:
            asyncio.run(delete_topics(settings))


async def create_topics(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(settings.topic(t), num_partitions=1, replication_factor=1) for t in Topic])
    finally:
        await admin.close()


async def delete_topics(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic(t) for t in Topic])
    except Exception:  # noqa: BLE001 — cleanup only
        pass
    finally:
        await admin.close()


# ------------------------------------------------------------------------------ 2. log


def bench_log(tag: str, poll_sizes: tuple[int, ...], proposals_per_size: int) -> dict[str, Any]:
    from services.common.inbound import Inbound
    from services.publication.service import open_log

    results: dict[str, Any] = {}
    with scratch(bench_settings(tag), topics=False) as settings:
        app = open_log(settings)
        emitted = 0

        def emit(items: Any) -> None:
            nonlocal emitted
            emitted += len(items)

        offset = 0

        def inbound(message: Any) -> Inbound:
            nonlocal offset
            offset += 1
            raw = encode(message)
            return Inbound("bench.runtime.v1", 0, offset, message, size=len(raw), raw=raw)

        try:
            for size in poll_sizes:
                polls = max(1, proposals_per_size // size)
                per_run = min(size, 10)
                run_count = max(1, (polls * size) // per_run)
                runs = [f"run-{size}-{i}" for i in range(run_count)]
                setup = [inbound(m) for r in runs for m in (admitted(r), *grant_messages(r))]
                for start in range(0, len(setup), 500):
                    app.process(setup[start:start + 500], emit)
                calls = iter(range(10**9))
                timings: list[float] = []
                for p in range(polls):
                    batch = []
                    for j in range(size):
                        index = p * size + j
                        batch.append(inbound(typical_part(runs[(index // per_run) % run_count], f"c-{next(calls)}")))
                    started = time.perf_counter()
                    app.process(batch, emit)
                    timings.append(time.perf_counter() - started)
                total = sum(timings)
                results[f"poll_{size}"] = {
                    "polls": polls,
                    "proposals": polls * size,
                    "proposals_per_s": polls * size / total,
                    "ms_per_poll": stats([t * 1000 for t in timings]),
                    "ms_per_proposal": total * 1000 / (polls * size),
                }
        finally:
            app.close()
    results["note"] = "typical 2-block proposal, runs of up to 10 proposals; previews handed to a no-op emit"
    return results


# ------------------------------------------------------------------------------ 3. e2e


def bench_e2e(tag: str, samples: int, warmup: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    with scratch(bench_settings(tag), topics=True) as settings:
        Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
        logs = {part: open(Path(settings.state_dir) / f"{part}.log", "ab") for part in ("publication", "relay")}  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
        env.update(IMPRINT_KAFKA_BOOTSTRAP=settings.kafka_bootstrap, IMPRINT_DATABASE_URL=str(settings.database_url),
                   IMPRINT_DATABASE_SCHEMA=str(settings.database_schema), IMPRINT_TOPIC_PREFIX=settings.topic_prefix,
                   IMPRINT_GROUP_PREFIX=settings.group_prefix, IMPRINT_STATE_DIR=str(settings.state_dir),
                   IMPRINT_LOG_LEVEL="WARNING")
        processes = {part: subprocess.Popen([sys.executable, "-m", "services.cli", "serve", part], env=env,
                                            stdout=logs[part], stderr=subprocess.STDOUT)
                     for part in ("publication", "relay")}

        async def measure() -> dict[str, Any]:
            producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True, linger_ms=0)
            consumer = AIOKafkaConsumer(settings.topic(Topic.PUBLICATION), bootstrap_servers=settings.kafka_bootstrap,
                                        group_id=None, auto_offset_reset="earliest", enable_auto_commit=False)
            await producer.start()
            await consumer.start()
            run = "run-e2e-bench"
            seen: dict[tuple[str, str], float] = {}

            async def send(message: Any) -> None:
                await producer.send_and_wait(settings.topic(Topic.RUNTIME), encode(message), key=run.encode(),
                                             headers=[("type", message.type.encode())])

            async def wait_for(candidate: str, kind: str, timeout: float = 60) -> float:
                deadline = time.monotonic() + timeout
                while (candidate, kind) not in seen:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no {kind} for {candidate}")
                    batch = await consumer.getmany(timeout_ms=20)
                    now = time.perf_counter()
                    for records in batch.values():
                        for record in records:
                            value = json.loads(record.value)
                            block = value.get("block") or {}
                            key = (block.get("candidate_id", ""), value["type"])
                            seen.setdefault(key, now)
                return seen[(candidate, kind)]

            try:
                for message in (admitted(run), *grant_messages(run)):
                    await send(message)
                published_ms: list[float] = []
                preview_ms: list[float] = []
                for i in range(warmup + samples):
                    call = f"e2e-{i}"
                    started = time.perf_counter()
                    await send(typical_part(run, call))
                    done = await wait_for(f"tool:{call}", "answer.published")
                    preview = await wait_for(f"tool:{call}", "answer.preview")
                    if i >= warmup:
                        published_ms.append((done - started) * 1000)
                        preview_ms.append((preview - started) * 1000)
                return {"published_ms": stats(published_ms), "preview_ms": stats(preview_ms), "warmup": warmup,
                        "note": "one proposal at a time; produce acknowledged → message read by a test consumer"}
            finally:
                await consumer.stop()
                await producer.stop()

        try:
            measured = asyncio.run(measure())
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
        shutil.rmtree(settings.state_dir, ignore_errors=True)  # the part logs, kept only when it failed
        return measured


# ------------------------------------------------------------------------------ main


def report(results: dict[str, Any]) -> str:
    lines = ["imprint Publication benchmarks", ""]
    core = results.get("core", {})
    for name, value in core.items():
        lines.append(f"  core  {name:<36} best {value['best']:9.1f} µs   median {value['median']:9.1f} µs")
    log = results.get("log", {})
    for name, value in log.items():
        if isinstance(value, dict):
            ms = value["ms_per_poll"]
            lines.append(f"  log   {name:<10} {value['proposals_per_s']:9.0f} proposals/s   "
                         f"{ms['mean']:8.2f} ms/poll (p50 {ms['p50']:.2f}, p95 {ms['p95']:.2f})   "
                         f"{value['ms_per_proposal']:.3f} ms/proposal")
    e2e = results.get("e2e", {})
    for name in ("published_ms", "preview_ms"):
        if name in e2e:
            v = e2e[name]
            lines.append(f"  e2e   {name:<14} p50 {v['p50']:7.1f}  p95 {v['p95']:7.1f}  max {v['max']:7.1f}  "
                         f"mean {v['mean']:7.1f} ms  (n={v['n']})")
    for part, error in results.get("errors", {}).items():
        lines.append(f"  {part}: FAILED: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", choices=("core", "log", "e2e"), action="append")
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    args = parser.parse_args(argv)
    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")
    import logging

    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # leader-election retries right after topic creation
    parts = args.only or ["core", "log", "e2e"]
    tag = uuid.uuid4().hex[:8]
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    errors: dict[str, str] = {}
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        "core": bench_core,
        "log": lambda: bench_log(tag, (1, 50, 500), 300 if args.quick else 2000),
        "e2e": lambda: bench_e2e(tag, samples=10 if args.quick else 50, warmup=3 if args.quick else 5),
    }
    for part in parts:
        started = time.monotonic()
        try:
            results[part] = jobs[part]()
        except Exception as error:  # noqa: BLE001 — a bench reports what failed and goes on
            errors[part] = f"{type(error).__name__}: {error}"
        results.setdefault("seconds", {})[part] = round(time.monotonic() - started, 1)
    if errors:
        results["errors"] = errors
    text = report(results)
    print(text)
    state = Path(os.environ.get("IMPRINT_STATE_DIR", Path.cwd() / ".imprint"))
    out = state / "bench" / "last.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\n  written to {out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

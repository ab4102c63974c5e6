"""Replay: ``imprint replay`` (a child of the launcher) over a cached Publication log, against the
raw notification-log read of the same table with psycopg.

The log is built once per size and kept in its own PostgreSQL schema
(``bench_log_<events>``), by bulk-writing runs through the Publication application
in-process (``services.publication.service.open_log`` → ``PublicationLog.process``
with polls of 500 messages, the same code ``imprint serve publication`` runs, just
without Kafka in front). A ``bench_meta`` table in that schema records the number of
events and a hash of the Publication code that wrote it: the log is rebuilt when the
code changes (the writer's event format is then the one the reader must replay), or
when ``--rebuild-log`` is given."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.procs import tree_rss_kb
from bench.workload import Sources, opening, typical_part
from services.common.launcher import Launcher
from services.common.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
WRITER_CODE = ("libs/imprint/publication", "libs/imprint/shredding.py", "libs/imprint/contracts",
               "services/publication", "services/common/keyring.py")
PROPOSALS_PER_RUN = 25


def writer_hash() -> str:
    digest = hashlib.sha256()
    for entry in WRITER_CODE:
        path = ROOT / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def log_schema(events: int) -> str:
    return f"bench_log_{events}"


def log_settings(base: Settings, events: int) -> Settings:
    return base.model_copy(update={"database_schema": log_schema(events), "topic_prefix": "benchlog.",
                                   "state_dir": Path(base.state_dir) / "bench-log"})


def events_table(settings: Settings) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(str(settings.database_schema)), sql.Identifier("publication_events"))


def count_events(settings: Settings) -> int:
    with psycopg.connect(str(settings.database_url)) as connection:
        row = connection.execute(sql.SQL("SELECT count(*) FROM {}").format(events_table(settings))).fetchone()
    return int(row[0]) if row else 0


def cached(settings: Settings) -> dict[str, Any] | None:
    try:
        with psycopg.connect(str(settings.database_url)) as connection:
            row = connection.execute(sql.SQL("SELECT events, writer, built_seconds, method FROM {}.bench_meta").format(
                sql.Identifier(str(settings.database_schema)))).fetchone()
    except psycopg.Error:
        return None
    if row is None:
        return None
    return {"events": row[0], "writer": row[1], "built_seconds": row[2], "method": row[3]}


def ensure_logs(base: Settings, sizes: tuple[int, ...], rebuild: bool, say: Callable[[str], None],
                reuse: bool = False) -> dict[int, Any]:
    """The cached logs of each size (built when missing or stale). One growing log is
    written up to the largest size; each smaller size is a copy of it taken on the way."""
    current = writer_hash()
    metas: dict[int, Any] = {}
    missing = []
    for size in sizes:
        meta = cached(log_settings(base, size))
        if meta and (meta["writer"] == current or reuse) and meta["events"] >= size and not rebuild:
            metas[size] = {**meta, "schema": log_schema(size), "cached": True,
                           "written_by_current_code": meta["writer"] == current}
        else:
            missing.append(size)
    if not missing:
        return metas
    work = f"bench_log_building_{missing[-1]}"
    building = base.model_copy(update={"database_schema": work, "topic_prefix": "benchlog.",
                                       "state_dir": Path(base.state_dir) / "bench-log"})
    say(f"building Publication logs of {', '.join(f'{m:,}' for m in missing)} events "
        f"(writer {current}; PublicationLog.process in-process, polls of 500) …")
    with psycopg.connect(str(base.database_url), autocommit=True) as connection:
        for schema in (work, *(log_schema(m) for m in missing)):
            connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    started = time.monotonic()

    def checkpoint(size: int, written: int) -> None:
        seconds = round(time.monotonic() - started, 1)
        target = log_schema(size)
        with psycopg.connect(str(base.database_url), autocommit=True) as connection:
            if size == missing[-1]:
                connection.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(work),
                                                                                  sql.Identifier(target)))
            else:
                copy_schema(connection, work, target)
            connection.execute(sql.SQL("CREATE TABLE {}.bench_meta (events bigint, writer text, built_seconds real, "
                                       "method text)").format(sql.Identifier(target)))
            connection.execute(sql.SQL("INSERT INTO {}.bench_meta VALUES (%s, %s, %s, %s)").format(sql.Identifier(target)),
                               (written, current, seconds, METHOD))
            connection.execute(sql.SQL("ANALYZE {}.publication_events").format(sql.Identifier(target)))
        metas[size] = {"events": written, "writer": current, "built_seconds": seconds, "method": METHOD,
                       "schema": target, "cached": False}
        say(f"  log of {written:,} events ready in {target} after {seconds:.0f} s")

    build_log(building, missing, checkpoint, say)
    return metas


METHOD = ("PublicationLog.process in-process (3 writer processes), polls of 500 messages; runs of 25 "
          "proposals; each writer cites a new public source every 500 runs")


def copy_schema(connection: psycopg.Connection[Any], source: str, target: str) -> None:
    connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(target)))
    tables = [r[0] for r in connection.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE'",
        (source,))]
    for table in tables:
        new, old = sql.Identifier(target, table), sql.Identifier(source, table)
        connection.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING INDEXES)").format(new, old))
        connection.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(new, old))


def build_log(settings: Settings, sizes: list[int], checkpoint: Callable[[int, int], None],
              say: Callable[[str], None], workers: int = 3) -> None:
    """Runs of typical proposals through the Publication application until the log
    holds each of ``sizes`` events in turn (``checkpoint`` is called at each, with the
    writers stopped). ``workers`` processes write side by side (their own runs, sources
    and tracking partition), since one writer mostly waits on its commits."""
    import multiprocessing

    from services.common.backends import backend_for

    backend_for(settings).prepare()
    context = multiprocessing.get_context("spawn")
    for phase, target in enumerate(sorted(sizes)):
        processes = [context.Process(target=_write_until, args=(settings, target, phase * workers + w),
                                     daemon=True) for w in range(workers)]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
            if process.exitcode != 0:
                raise RuntimeError(f"a log writer failed (exit {process.exitcode})")
        checkpoint(target, count_events(settings))


def _write_until(settings: Settings, target: int, shard: int) -> None:
    from services.common.observability import configure_logging

    configure_logging(json=False, level="WARNING")  # before the services bind their loggers
    from imprint.contracts.registry import encode
    from services.common.inbound import Inbound
    from services.publication.application import open_log

    app = open_log(settings)
    topic = settings.topic("imprint.runtime.v1")
    offset = 0

    def inbound(message: Any) -> Inbound:
        nonlocal offset
        offset += 1
        raw = encode(message)
        return Inbound(topic, shard, offset, message, size=len(raw), raw=raw, key=message.run_id.encode())

    try:
        run = 0
        while int(app.recorder.max_notification_id() or 0) < target:  # type: ignore[attr-defined]
            batch: list[Any] = []
            while len(batch) < 500:
                run_id = f"run-log-{shard:02d}-{run:07d}"
                sources = Sources(public=f"src:public:report-{shard}-{run // 500}",
                                  private=f"src:private:acct-bench:memo-{shard}-{run // 500}")
                run += 1
                batch.extend(inbound(m) for m in opening(run_id, sources))
                batch.extend(inbound(typical_part(run_id, f"{run_id}-c{i}", sources)) for i in range(PROPOSALS_PER_RUN))
            app.process(batch, lambda _items: None)
    finally:
        app.close()


def _read_range(settings: Settings, first: int, last: int, page: int) -> dict[str, Any]:
    """One connection reading notification ids ``first..last`` in pages (one process of
    :func:`raw_read`); its clock starts once it is connected, as a replay worker's does."""
    query = sql.SQL("SELECT notification_id, originator_id, originator_version, topic, state FROM {} "
                    "WHERE notification_id > %s AND notification_id <= %s ORDER BY notification_id LIMIT %s"
                    ).format(events_table(settings))
    read, size, after = 0, 0, first - 1
    with psycopg.connect(str(settings.database_url)) as connection:
        started, cpu = time.time(), time.process_time()
        while True:
            rows = connection.execute(query, (after, last, page), prepare=True).fetchall()
            if not rows:
                break
            read += len(rows)
            after = rows[-1][0]
            size += sum(len(r[4]) for r in rows)
        return {"read": read, "bytes": size, "started": started, "ended": time.time(),
                "cpu_s": time.process_time() - cpu}


def raw_read(settings: Settings, connections: int = 1, page: int = 500) -> dict[str, Any]:
    """Read every row of the notification log in pages, as eventsourcing's
    ``select_notifications`` does (the floor under any replay), over ``connections``
    connections side by side, one process each, every one reading its own contiguous range
    of notification ids: the same parallelism a replay with as many workers has."""
    import multiprocessing

    with psycopg.connect(str(settings.database_url)) as connection:
        row = connection.execute(sql.SQL("SELECT min(notification_id), max(notification_id) FROM {}").format(
            events_table(settings))).fetchone()
    low, high = (int(row[0]), int(row[1])) if row and row[0] is not None else (1, 0)
    step = max(1, -(-(high - low + 1) // connections))
    ranges = [(settings, start, min(high, start + step - 1), page) for start in range(low, high + 1, step)]
    with multiprocessing.get_context("spawn").Pool(max(1, len(ranges))) as pool:
        parts = pool.starmap(_read_range, ranges)
    read = sum(p["read"] for p in parts)
    seconds = max((max(p["ended"] for p in parts) - min(p["started"] for p in parts)) if parts else 0.0, 1e-6)
    return {"events": read, "seconds": round(seconds, 2), "events_per_s": round(read / seconds),
            "cpu_s": round(sum(p["cpu_s"] for p in parts), 2),
            "mean_state_bytes": round(sum(p["bytes"] for p in parts) / max(1, read)), "page": page,
            "connections": connections}


def median_of(rounds: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The round whose ``key`` is the median (rounds without it count as lowest), with every
    round's ``key`` kept beside it so the spread shows."""
    ordered = sorted(rounds, key=lambda r: (r.get(key) is not None, r.get(key) or 0))
    return {**ordered[len(ordered) // 2], f"rounds_{key}": [r.get(key) for r in rounds]}


def run_replay(settings: Settings, rss_limit_mb: int, timeout: float, workers: int) -> dict[str, Any]:
    """``imprint replay`` as a command of the launcher (stdout to /dev/null). Its peak RSS is
    the largest sum, sampled from /proc every 0.2 s, of the replay's process and its
    workers; a replay whose processes pass ``rss_limit_mb`` together is killed (reported,
    not hidden). Its CPU is the rusage the launcher reaped it with (its workers included).

    That rusage's ``ru_maxrss`` is kept as ``ru_maxrss_mb`` but is not the replay's memory:
    the child is forked from this bench process, and until it executes the replay its
    resident set is the bench's own (~300 MB in a full run, where the same replay started
    from a small bench process measures ~100 MB)."""
    launcher = Launcher(settings.model_copy(update={"log_level": "WARNING"}))
    started = time.perf_counter()
    child = launcher.start_command("replay", "services.cli", ["replay", "--workers", str(workers)],
                                   discard_stdout=True)
    stopped: dict[str, Any] = {}
    sampled = {"max_rss_kb": 0}
    done = threading.Event()

    def watch() -> None:
        while True:
            rss = tree_rss_kb(child.pid) or 0
            sampled["max_rss_kb"] = max(sampled["max_rss_kb"], rss)
            if rss > rss_limit_mb * 1024 and not stopped:
                stopped["why"] = f"RSS passed {rss_limit_mb} MB"
                launcher.kill("replay")
            elif time.perf_counter() - started > timeout and not stopped:
                stopped["why"] = f"ran longer than {timeout:.0f} s"
                launcher.kill("replay")
            if done.wait(0.2):
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    code = launcher.wait_exit("replay", timeout=None)
    seconds = time.perf_counter() - started
    done.set()
    watcher.join(timeout=2)
    usage = child.usage
    result: dict[str, Any] = {
        "seconds": round(seconds, 2), "exit": code, "peak_rss_mb": round(sampled["max_rss_kb"] / 1024),
        "ru_maxrss_mb": round(usage.ru_maxrss / 1024) if usage else None,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2) if usage else None, "workers": workers,
    }
    if stopped:
        result["stopped"] = stopped["why"]
    elif code != 0:
        result["stderr_tail"] = launcher.log("replay")[-800:]
    return result


ROUNDS = 3


def bench_replay(base: Settings, sizes: tuple[int, ...], rebuild: bool, rss_limit_mb: int, timeout: float,
                 say: Callable[[str], None], reuse: bool = False, workers: int | None = None) -> dict[str, Any]:
    """Each size: ``ROUNDS`` rounds of a raw read then a replay, interleaved so that both see the
    same machine; each figure is the median round. The raw read uses as many connections
    as the replay has workers."""
    from services.recovery.replaying import default_workers

    workers = workers or default_workers()
    results: dict[str, Any] = {
        "method": (f"imprint replay --workers {workers} (subprocess, stdout discarded) vs psycopg pages of 500 over "
                   f"{workers} connections (one process each); median of {ROUNDS} interleaved rounds"),
        "workers": workers, "rounds": ROUNDS, "sizes": {}}
    metas = ensure_logs(base, sizes, rebuild, say, reuse)
    for size in sizes:
        meta = metas[size]
        settings = log_settings(base, size)
        events = count_events(settings)
        # Once unmeasured first: a log evicted from the page cache by other work reads at
        # disk speed, and the replay that follows would then be held against a cold floor.
        raw_read(settings, workers)
        raws, replays = [], []
        for round_ in range(ROUNDS):
            raws.append({**raw_read(settings, workers), "warmed": True})
            replay = run_replay(settings, rss_limit_mb, timeout, workers)
            ok = "stopped" not in replay and replay["exit"] == 0
            replay["events_per_s"] = round(events / replay["seconds"]) if ok else None
            replays.append(replay)
            say(f"  round {round_ + 1}/{ROUNDS}: raw read {raws[-1]['events_per_s']:,} events/s over {workers} "
                f"connections; imprint replay {replay}")
        results["sizes"][str(size)] = {"log": meta, "events": events, "raw": median_of(raws, "events_per_s"),
                                       "replay": median_of(replays, "events_per_s")}
    return results

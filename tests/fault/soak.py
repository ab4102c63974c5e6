"""``make soak`` (``python -m tests.fault.soak``): a bounded chaos soak, not part of
``make test``.

A private PostgreSQL and Kafka (deploy/local on free ports, own state dir), the four
parts as real processes, and a steady load of proposals from many runs with source
revocations and one SSE client per run. Every few seconds a random part is SIGKILLed
and started again — a process of the stack, or now and then the broker (SIGKILL) or
the database server (``pg_ctl -m immediate``) — until the time is up or the load was
all sent. Then the load drains and the shared invariant check runs
(:func:`tests.fault.invariants.check_invariants`). It prints the count of kills
survived; the exit code is 0 only if every invariant held.

    python -m tests.fault.soak [--seconds 180] [--interval 4] [--seed N] [--no-servers]"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.fault.invariants import check_invariants
from tests.fault.parts import Parts
from tests.fault.private_infra import PrivateInfra
from tests.fault.workload import Workload, private_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180, help="how long the chaos lasts (default 180)")
    parser.add_argument("--interval", type=float, default=4, help="mean seconds between kills (default 4)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--pace", type=float, default=0.15, help="seconds between two proposals")
    parser.add_argument("--no-servers", action="store_true", help="kill only the stack's processes")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    parts_per_run = max(4, int(args.seconds / (args.pace * args.runs)))
    print(f"soak: seed {seed}, {args.seconds:.0f}s of chaos, a kill every ~{args.interval}s, "
          f"{args.runs} runs x {parts_per_run} proposals", flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="imprint-soak-"))  # the parts' logs; kept when the soak fails
    infra = PrivateInfra(partitions=3).up()
    kills: Counter[str] = Counter()
    try:
        settings = private_settings(infra.bootstrap, infra.database_url, scratch, partitions=3)
        with Parts(settings) as parts:
            parts.serve_all()
            load = Workload(settings, parts.delivery_urls, runs=args.runs, parts=parts_per_run,
                            pace=args.pace).start()
            victims = [*parts.names()] + ([] if args.no_servers else ["kafka", "postgres"])
            weights = [1.0] * len(parts.names()) + ([] if args.no_servers else [0.15, 0.15])
            deadline = time.monotonic() + args.seconds
            try:
                while time.monotonic() < deadline and not load.finished_sending.is_set():
                    time.sleep(rng.uniform(0.5, 1.5) * args.interval)
                    victim = rng.choices(victims, weights)[0]
                    if victim == "kafka":
                        infra.kill_kafka()
                        infra.start_kafka()
                    elif victim == "postgres":
                        infra.kill_postgres()
                        time.sleep(rng.uniform(0, 2))
                        infra.start_postgres()
                    elif parts.kill9(victim) != -signal.SIGKILL:
                        parts.restart(victim)
                        continue
                    else:
                        time.sleep(rng.uniform(0, 1.5))
                        parts.restart(victim)
                    kills[victim] += 1
                    print(f"soak: killed {victim} ({sum(kills.values())} kills, "
                          f"{len(load.accepted)}/{load.proposals_expected} proposals accepted)", flush=True)
                load.wind_down()  # the chaos is over: the runs complete, the load drains
                load.finish(timeout=600)
            finally:
                load.stop()
            report = check_invariants(settings, load, parts.delivery_urls)
            exits = Counter(name for name, _ in parts.exits)
    except AssertionError as failure:
        print(f"soak: FAILED after {sum(kills.values())} kills {dict(kills)} (seed {seed}; logs in {scratch}):\n"
              f"{failure}", flush=True)
        return 1
    finally:
        infra.down()
    print(f"soak: survived {sum(kills.values())} kills {dict(kills)} (seed {seed}); "
          f"parts that exited on their own and were restarted: {dict(exits)}", flush=True)
    print("soak: invariants held: " + json.dumps(report), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

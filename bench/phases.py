"""The end-to-end phases of ``python -m bench``, each driving the running stack through a
:class:`bench.e2e.Driver` and writing its figures into the results (``e2e``, ``windows``,
``samples``, ``profiles``). ``run`` runs those selected (``bench.__main__.E2E_PHASES`` names
them in their order; ``--only <phase>`` picks some). Every phase
that offers a load relative to the burst saturation finds it measured first (``cost``, or
one 25/run burst when ``cost`` is not run)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import floors, profile, report
from bench.memory import memory
from bench.e2e import Driver
from bench.peer.runner import peer
from bench.stats import median_of_rounds
from bench.workload import Sources, opening, typical_part

PER_RUN = 25
"""Proposals per run of every burst and offered load but the run-size and many-runs ones."""


def sources(name: str) -> Sources:
    return Sources(public=f"src:public:{name}", private=f"src:private:acct-bench:{name}")


@dataclass
class Context:
    settings: Any
    stack: Any
    plan: Any
    driver: Driver
    results: dict[str, Any]
    samples: dict[str, list[float]]
    say: Callable[[str], None]
    profile_dir: Path | None

    @property
    def e2e(self) -> dict[str, Any]:
        return self.results["e2e"]  # type: ignore[no-any-return]

    @property
    def windows(self) -> dict[str, Any]:
        return self.results["windows"]  # type: ignore[no-any-return]

    def burst_rate(self) -> float:
        """Burst saturation (the 25/run median), or the plan's pinned rate: the unit every offered
        load is set in."""
        rate = self.plan.pinned_burst_per_s or (self.e2e.get("saturation") or {}).get("per_s")
        if not rate:
            raise RuntimeError("no burst saturation measured: the loads relative to it cannot be set")
        return float(rate)

    async def paced(self, label: str, rate: float, seconds: float, runs: int, clients: bool,
                    drain: float) -> dict[str, Any]:
        row = await self.driver.paced(label, rate, seconds, runs, sources(label), clients=clients, drain=drain)
        drained = (f"drained {row['drained_s']} s after ({report._drains(row.get('drain_s'))})"
                   if row.get("drained_s") is not None else
                   f"not drained {drain:.0f} s after ({report._drains(row.get('drain_s'))})")
        self.say(f"  offered {row['offered_per_s']}/s (sent {row.get('sent_per_s')}/s, runs admitted in "
                 f"{row['admit_seconds']} s): published {row.get('in_window_per_s')}/s in the window, achieved "
                 f"{row.get('achieved_per_s')}/s, keeps_up={row['keeps_up']}, {drained}; machine CPU "
                 f"{row['machine_cpu_ms_per_proposal']} ms/proposal (parts and bench {row['processes_cpu_ms_per_proposal']}); "
                 f"published {row['published_ms']}" + (f"; sse {row['sse_ms']}" if row.get("sse_ms") else ""))
        return row


# ------------------------------------------------------------------ burst saturation and cost growth


async def cost(ctx: Context) -> None:
    """Bursts of each run size, interleaved round after round; the 25/run median is the burst
    saturation."""
    plan, e2e = ctx.plan, ctx.e2e
    sized: dict[int, list[dict[str, Any]]] = {size: [] for size in plan.run_sizes}
    for round_ in range(plan.rounds):
        for size in plan.run_sizes:
            ctx.say(f"burst: {plan.run_size_proposals} proposals in runs of {size} (round {round_ + 1}/{plan.rounds})")
            row = await ctx.driver.burst(f"size{size}r{round_}", plan.run_size_proposals, size,
                                         sources(f"size-{size}-r{round_}"))
            sized[size].append(row)
            ctx.say(f"  {row['per_s']}/s  cpu ms/proposal {row['cpu_ms_per_proposal']}  delivery {row['delivery_per_s']}/s")
    e2e["run_size"] = {}
    for size, rows in sized.items():
        row = e2e["run_size"][str(size)] = median_of_rounds(rows)
        ctx.windows[f"burst {size}/run"] = row["delivery_window"]
        ctx.say(f"  {size}/run, median of {len(rows)}: {row['per_s']}/s  cpu ms/proposal {row['cpu_ms_per_proposal']}")
    e2e["saturation"] = dict(e2e["run_size"][str(plan.run_sizes[0])])


async def saturation(ctx: Context) -> None:
    """Burst saturation alone (one 25/run burst), for the phases set relative to it when
    ``cost`` does not run."""
    plan = ctx.plan
    ctx.say(f"burst saturation: {plan.run_size_proposals} proposals in runs of {PER_RUN}")
    row = await ctx.driver.burst("saturation", plan.run_size_proposals, PER_RUN, sources("saturation"))
    ctx.e2e["saturation"] = median_of_rounds([row])
    ctx.windows[f"burst {PER_RUN}/run"] = row["delivery_window"]
    ctx.say(f"  {row['per_s']}/s  cpu ms/proposal {row['cpu_ms_per_proposal']}")


async def instances(ctx: Context) -> None:
    """The same burst with two Publication instances in one consumer group (issue 12)."""
    ctx.say("burst with 2 Publication instances in one consumer group (issue 12)")
    ctx.stack.add("publication", "publication-2")
    await asyncio.sleep(10)  # the new member joins; the group rebalances the partitions
    two = await ctx.driver.burst("two-publications", ctx.plan.run_size_proposals, PER_RUN, sources("two"))
    ctx.stack.remove("publication-2")
    await asyncio.sleep(5)
    one = ctx.e2e["saturation"]
    ctx.e2e["publication_instances"] = {
        "1": {"per_s": one["per_s"], "cpu_ms_per_proposal": one["cpu_ms_per_proposal"]},
        "2": {"per_s": two["per_s"], "cpu_ms_per_proposal": two["cpu_ms_per_proposal"],
              "publication_window": two["publication_window"]},
    }
    ctx.windows["burst, 2 Publication instances"] = two["delivery_window"]
    ctx.say(f"  1 instance {one['per_s']}/s, 2 instances {two['per_s']}/s")


async def age(ctx: Context) -> None:
    """Bursts citing a fresh source and one cited by many earlier runs, interleaved."""
    plan, driver = ctx.plan, ctx.driver
    ctx.say(f"source age: {plan.earlier_runs:,} earlier runs cite one source")
    hot = sources("hot")
    runs = [f"run-old-{r:06d}" for r in range(plan.earlier_runs)]
    started = time.perf_counter()
    for chunk in range(0, len(runs), 1000):
        part = runs[chunk:chunk + 1000]
        await driver.send(m for run in part for m in (*opening(run, hot), typical_part(run, f"old-{run}", hot)))
    await driver.caught_up("publication", driver.runtime, timeout=900)
    await driver.caught_up("delivery", driver.publication, timeout=900)
    ctx.say(f"  built in {time.perf_counter() - started:.0f} s")
    fresh_rounds, aged_rounds = [], []
    for round_ in range(plan.rounds):  # fresh and aged interleaved, round after round
        fresh_rounds.append(await driver.burst(f"fresh-r{round_}", plan.age_proposals, PER_RUN,
                                               sources(f"fresh-r{round_}")))
        aged_rounds.append(await driver.burst(f"aged-r{round_}", plan.age_proposals, PER_RUN, hot))
    fresh, aged = median_of_rounds(fresh_rounds), median_of_rounds(aged_rounds)
    ctx.e2e["source_age"] = {"earlier_runs": plan.earlier_runs, "fresh": fresh, "aged": aged,
                             "build_seconds": round(time.perf_counter() - started, 1)}
    ctx.windows["burst, fresh source"] = fresh["delivery_window"]
    ctx.windows[f"burst, source cited by {plan.earlier_runs:,} runs"] = aged["delivery_window"]
    ctx.say(f"  fresh {fresh['per_s']}/s {fresh['cpu_ms_per_proposal']}  aged {aged['per_s']}/s "
            f"{aged['cpu_ms_per_proposal']}")


# ------------------------------------------------------------------ the whole stack's CPU per proposal


async def cpu(ctx: Context) -> None:
    """Bursts of 25/run read by one SSE client per run: the machine's busy core-seconds from
    the first produce to the last SSE frame, per proposal (the median of ``rounds``)."""
    plan = ctx.plan
    rows = []
    for round_ in range(plan.rounds):
        ctx.say(f"whole stack: {plan.stack_cpu_proposals} proposals in runs of {PER_RUN}, one SSE client per run "
                f"(round {round_ + 1}/{plan.rounds})")
        row = await ctx.driver.whole_stack(f"stack-r{round_}", plan.stack_cpu_proposals, PER_RUN,
                                           sources(f"stack-r{round_}"))
        rows.append(row)
        ctx.say(f"  to the last SSE frame: {row['per_s']}/s, machine CPU {row['machine_cpu_ms_per_proposal']} ms/proposal "
                f"({row['window']['machine_busy_cores']} busy cores); until every part caught up "
                f"{row['drained_machine_cpu_ms_per_proposal']} ms/proposal; the parts and the bench alone "
                f"{row['processes_cpu_ms_per_proposal']} ms/proposal")
    row = ctx.e2e["stack_cpu"] = median_of_rounds(
        rows, rate="machine_cpu_ms_per_proposal",
        figures=("machine_cpu_ms_per_proposal", "drained_machine_cpu_ms_per_proposal", "processes_cpu_ms_per_proposal",
                 "stack_cpu_ms_per_proposal", "per_s"))
    ctx.windows["whole stack, to the SSE frame"] = row["window"]


# ------------------------------------------------------------------ fan-out


async def fanout(ctx: Context) -> None:
    plan, driver = ctx.plan, ctx.driver
    ctx.say(f"fan-out: {plan.fanout_clients} SSE clients on one run")
    fan = await driver.fanout("fanout", plan.fanout_clients, plan.fanout_rate, plan.fanout_seconds,
                              sources("fanout"), drain=60)
    raw = fan.pop("_samples", None)
    if raw:
        ctx.samples[f"published→SSE, {plan.fanout_clients} clients"] = raw
    ctx.e2e["fanout"] = fan
    ctx.windows[f"fan-out {plan.fanout_clients} clients"] = fan["window"]
    ctx.say(f"  {fan['published_to_client_ms']}  missing {fan['missing_deliveries']}  "
            f"delivery RSS {fan['window']['peak_rss_mb'].get('delivery')} MB")
    if ctx.profile_dir is not None:
        ctx.say("profile: py-spy on delivery during a second fan-out")
        recorder = profile.start(ctx.stack.pids()["delivery"], ctx.profile_dir / "delivery-fanout.txt",
                                 plan.profile_seconds)
        await driver.fanout("fanout-profile", plan.fanout_clients, plan.fanout_rate, plan.profile_seconds,
                            sources("fanout"), drain=20)
        error = profile.finish(recorder)
        ctx.results["profiles"]["delivery (fan-out)"] = (
            {**profile.top_costs(ctx.profile_dir / "delivery-fanout.txt"),
             "when": f"{plan.fanout_clients} SSE clients on one run, {plan.fanout_rate}/s"}
            if error is None else error)
        await driver.caught_up("delivery", driver.publication, timeout=300)


# ------------------------------------------------------------------ offered loads relative to the burst


async def latency(ctx: Context) -> None:
    """Offered ``latency_loads`` (5% and 30%) of the burst rate over ``latency_runs`` runs, one
    SSE client on each; the transport floor's latency at the highest of those rates beside."""
    plan, burst = ctx.plan, ctx.burst_rate()
    top = max(plan.latency_loads)
    transport_rate = max(1, round(top * burst))
    ctx.say(f"transport floor at {transport_rate}/s ({top:.0%} of the burst) for {plan.latency_seconds:.0f} s")
    transport = await floors.transport_floor(ctx.settings, ctx.settings.topic("bench.transport"), (transport_rate,),
                                             plan.latency_seconds, 0)
    floor = transport["paced"][str(transport_rate)]
    raw = floor.pop("_samples", None)
    if raw:
        ctx.samples[f"transport floor @{top:.0%}"] = raw
    ctx.say(f"  {floor}")
    out = ctx.e2e["latency"] = {"burst_per_s": burst, "runs": plan.latency_runs, "sse_clients": plan.latency_runs,
                                "transport": {"load": top, "offered_per_s": transport_rate, **floor}, "steps": {}}
    for load in plan.latency_loads:
        rate = load * burst
        ctx.say(f"latency: offered {load:.0%} of the burst ({rate:.0f}/s) for {plan.latency_seconds:.0f} s over "
                f"{plan.latency_runs} runs, one SSE client each")
        row = await ctx.paced(f"latency{round(load * 1000)}", rate, plan.latency_seconds, plan.latency_runs,
                              clients=True, drain=max(5.0, plan.latency_seconds))
        raw_samples = row.pop("_samples", {})
        for kind in ("sse", "preview"):
            if raw_samples.get(kind):
                ctx.samples[f"produce→{kind} @{load:.0%}"] = raw_samples[kind]
        row["load"] = load
        out["steps"][str(load)] = row
        ctx.windows[f"latency {load:.0%} ({rate:.0f}/s)"] = row["window"]


async def sustained(ctx: Context) -> None:
    """The paced ladder: offered ``ladder`` fractions of the burst rate for ``step_seconds``
    each, 25/run, one SSE client per run, up to the first step that does not keep up."""
    plan, burst = ctx.plan, ctx.burst_rate()
    paced = ctx.e2e["paced"] = {}
    for load in plan.ladder:
        rate = load * burst
        ctx.say(f"paced: offered {load:.0%} of the burst ({rate:.0f}/s) for {plan.step_seconds:.0f} s "
                f"(one SSE client per run)")
        count = max(1, int(rate * plan.step_seconds))
        row = await ctx.paced(f"paced{round(load * 1000)}", rate, plan.step_seconds, math.ceil(count / PER_RUN),
                              clients=True, drain=max(5.0, 1.5 * plan.step_seconds))
        row.pop("_samples", None)
        row["load"] = load
        paced[f"{rate:.0f}"] = row
        ctx.windows[f"paced {load:.0%} ({rate:.0f}/s)"] = row["window"]
        if not row["keeps_up"]:
            break
    ctx.e2e["sustained"] = report.sustained(paced)


async def many_runs(ctx: Context) -> None:
    """Offered ``many_runs_load`` (0.5) of the burst rate spread over each of ``many_runs``
    run counts (200 and 5,000 in flight), the same proposals in all: ``many_runs_per_run``
    each over the most runs. The counts interleaved, round after round; the medians."""
    plan, burst = ctx.plan, ctx.burst_rate()
    rate = plan.many_runs_load * burst
    proposals = max(plan.many_runs) * plan.many_runs_per_run
    seconds = proposals / rate
    shaped: dict[int, list[dict[str, Any]]] = {runs: [] for runs in plan.many_runs}
    for round_ in range(plan.many_runs_rounds):
        for runs in plan.many_runs:
            ctx.say(f"many runs: {proposals:,} proposals over {runs:,} runs in flight, offered "
                    f"{plan.many_runs_load:.0%} of the burst ({rate:.0f}/s, {seconds:.0f} s; "
                    f"round {round_ + 1}/{plan.many_runs_rounds})")
            row = await ctx.paced(f"runs{runs}r{round_}", rate, seconds, runs, clients=False,
                                  drain=plan.drain_timeout)
            row.pop("_samples", None)
            shaped[runs].append(row)
    out = ctx.e2e["many_runs"] = {"load": plan.many_runs_load, "burst_per_s": burst, "offered_per_s": round(rate, 1),
                                  "proposals": proposals, "seconds": round(seconds, 1), "shapes": {}}
    for runs, rows in shaped.items():
        row = out["shapes"][str(runs)] = median_of_rounds(
            rows, rate="machine_cpu_ms_per_proposal",
            figures=("machine_cpu_ms_per_proposal", "processes_cpu_ms_per_proposal", "drained_s", "in_window_per_s",
                     "achieved_per_s", "admit_seconds"))
        ctx.windows[f"{runs:,} runs in flight ({rate:.0f}/s)"] = row["window"]
        ctx.say(f"  {runs:,} runs, median of {len(rows)}: machine CPU {row['machine_cpu_ms_per_proposal']} ms/proposal "
                f"(the parts and the bench alone {row['processes_cpu_ms_per_proposal']}), drained {row['drained_s']} s "
                f"after the window; admitted in {row['admit_seconds']} s")


async def overload(ctx: Context) -> None:
    """Offered ``overload_load`` (1.2) of the burst rate for ``overload_seconds``, 25/run: the
    rate published while it is offered, and how long the backlog takes to drain after."""
    plan, burst = ctx.plan, ctx.burst_rate()
    rate = plan.overload_load * burst
    count = max(1, int(rate * plan.overload_seconds))
    ctx.say(f"overload: offered {plan.overload_load:.0%} of the burst ({rate:.0f}/s) for {plan.overload_seconds:.0f} s")
    row = await ctx.paced("overload", rate, plan.overload_seconds, math.ceil(count / PER_RUN), clients=False,
                          drain=plan.drain_timeout)
    row.pop("_samples", None)
    row.update(load=plan.overload_load, burst_per_s=burst)
    ctx.e2e["overload"] = row
    ctx.windows[f"overload {plan.overload_load:.0%} ({rate:.0f}/s), until drained"] = row["window"]


# ------------------------------------------------------------------ profiles


async def profiles(ctx: Context) -> None:
    """py-spy on every part during a burst of 1.5× the burst rate's worth of ``profile_seconds``."""
    assert ctx.profile_dir is not None
    plan = ctx.plan
    recorders = {part: profile.start(pid, ctx.profile_dir / f"{part}.txt", plan.profile_seconds)
                 for part, pid in ctx.stack.pids().items()}
    rate = ctx.burst_rate() * 1.5
    count = int(rate * plan.profile_seconds)
    when = f"an overload burst of {count} proposals, {PER_RUN}/run"
    ctx.say(f"profile: py-spy on every part during {when}")
    await ctx.driver.burst("profile", count, PER_RUN, sources("profile"), delivery=False, timeout=600)
    for part, recorder in recorders.items():
        error = profile.finish(recorder)
        ctx.results["profiles"][part] = ({**profile.top_costs(ctx.profile_dir / f"{part}.txt"), "when": when}
                                         if error is None else error)
    # A paced load costs each part more per proposal than a burst (a poll holds a few
    # proposals): its profile is where the per-poll fixed cost shows.
    load = max(plan.latency_loads)
    paced_rate = load * ctx.burst_rate()
    recorders = {part: profile.start(pid, ctx.profile_dir / f"{part}-paced.txt", plan.profile_seconds)
                 for part, pid in ctx.stack.pids().items()}
    when = f"{load:.0%} of the burst paced ({paced_rate:.0f}/s) over {plan.latency_runs} runs, one SSE client each"
    ctx.say(f"profile: py-spy on every part at {when}")
    await ctx.paced("profile-paced", paced_rate, plan.profile_seconds, plan.latency_runs, clients=True,
                    drain=max(5.0, plan.latency_seconds))
    for part, recorder in recorders.items():
        error = profile.finish(recorder)
        ctx.results["profiles"][f"{part} (paced)"] = (
            {**profile.top_costs(ctx.profile_dir / f"{part}-paced.txt"), "when": when} if error is None else error)
    for part, prof in ctx.results["profiles"].items():
        ctx.say(f"  {part}: {prof.get('cpu', prof) if isinstance(prof, dict) else prof}")


RUNNERS = {"cost": cost, "instances": instances, "cpu": cpu, "age": age, "fanout": fanout, "latency": latency,
           "sustained": sustained, "many_runs": many_runs, "memory": memory, "overload": overload, "peer": peer}


async def run(ctx: Context, selected: tuple[str, ...], errors: dict[str, str],
              checkpoint: Callable[[], None]) -> None:
    """Warm up, then each phase of ``selected`` in its order (burst saturation first when
    ``cost`` is not among them), then the profiles; a phase that fails is reported under
    ``errors["e2e.<phase>"]`` and the next one starts once the stack is quiet again. After
    each phase its runs complete, as a runtime's do: the next phase does not run beside
    thousands of runs that stay in flight forever."""
    driver = ctx.driver
    await asyncio.to_thread(ctx.stack.wait_ready)  # in a thread: the driver's consumers run on this loop
    ctx.say("warm-up")
    await driver.burst("warm", 50, PER_RUN, Sources(), delivery=True, timeout=120)
    steps = list(selected)
    if "cost" not in steps:
        steps.insert(0, "saturation")
    if ctx.profile_dir is not None:
        steps.append("profiles")
    runners = {**RUNNERS, "saturation": saturation, "profiles": profiles}
    for name in steps:
        started = time.monotonic()
        try:
            await runners[name](ctx)
            ending = time.monotonic()
            ended = await driver.complete_runs()
            ctx.results["seconds"][f"e2e.{name}.completing_runs"] = round(time.monotonic() - ending, 1)
            ctx.say(f"  completed the phase's {ended:,} runs in {time.monotonic() - ending:.0f} s")
        except Exception as error:  # noqa: BLE001 — report it and go on
            import traceback

            errors[f"e2e.{name}"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
            ctx.driver.close_clients()
            ctx.stack.check_alive()  # a part that died ends the section
            await driver.quiet()
        ctx.results["seconds"][f"e2e.{name}"] = round(time.monotonic() - started, 1)
        checkpoint()

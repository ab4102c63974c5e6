"""The summary: every figure, the performance issue's targets (per unit of machine CPU) with
PASS/MISS; Markdown and PNG plots next to the JSON, and the run's one line of the history file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import memory
from bench.peer import compare


def _get(data: Any, *path: Any) -> Any:
    for key in path:
        if data is None:
            return None
        if isinstance(data, dict):
            data = data.get(str(key)) if str(key) in data else data.get(key)
        else:
            return None
    return data


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b in (None, 0):
        return None
    return round(a / b, 3)


def _parts(cpu: Any) -> str:
    """CPU ms per proposal of publication / journal / delivery."""
    if not cpu:
        return "—"
    return " / ".join(_fmt(cpu.get(part), 2) for part in ("publication", "journal", "delivery"))


def _drains(drain: Any) -> str:  # also bench.phases' progress lines
    """Seconds after a load's window until each part caught up (``behind``: not within the deadline)."""
    if not drain:
        return "—"
    return ", ".join(f"{part} {'behind' if at is None else _fmt(at, 2)}" for part, at in drain.items())


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def sustained(paced: dict[str, Any]) -> dict[str, Any]:
    """The highest paced step that kept up, below the first that did not."""
    best: dict[str, Any] | None = None
    failed_at = None
    for rate, row in sorted(paced.items(), key=lambda kv: float(kv[0])):
        if not row.get("keeps_up"):
            failed_at = float(rate)
            break
        best = row
    return {"offered_per_s": best["offered_per_s"] if best else None,
            "achieved_per_s": best.get("achieved_per_s") if best else None,
            "first_failing_offered_per_s": failed_at}


def rerender(path: Path) -> None:
    """Recompute the derived figures (keeps-up, sustained, targets) of a results JSON
    (``latest.json``) with the current rules and write its Markdown and plots again. The
    history file keeps the line the run appended."""
    import json

    from bench.e2e import keeps_up

    results = json.loads(path.read_text())
    paced = results.get("e2e", {}).get("paced") or {}
    for row in [*paced.values(), *((results.get("e2e", {}).get("latency") or {}).get("steps") or {}).values()]:
        row["keeps_up"] = keeps_up(row)
    if paced:
        results["e2e"]["sustained"] = sustained(paced)
    results["targets"] = targets(results)
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    path.with_suffix(".md").write_text(markdown(results))
    plots(results, path.with_suffix(""))


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The performance issue's targets, set per unit of machine CPU: each with a short,
    stable ``key`` (the history line's field), the measured value, the bound and PASS/MISS
    (``n/a`` when the run did not measure it)."""
    e2e = results.get("e2e", {})
    floors = results.get("floors", {})
    plan = results.get("plan") or {}
    rows: list[dict[str, Any]] = []

    def add(key: str, name: str, value: Any, bound: Any, better: str, unit: str = "×") -> None:
        if value is None:
            status = "n/a"
        elif isinstance(value, str):  # what was measured cannot meet the bound (e.g. never drained)
            status = "MISS"
        elif better == "drains":
            status = "PASS"
        elif better == "floor":  # reported beside the targets, judged by none
            status = "floor"
        else:
            status = "PASS" if (value >= bound if better == "higher" else value <= bound) else "MISS"
        rows.append({"key": key, "target": name, "value": value, "bound": bound, "better": better, "unit": unit,
                     "status": status})

    add("rest_stack_percent", "Rest: the stack's CPU with no traffic and no client (its parts, and the broker and "
        "PostgreSQL above their own floor), % of one core", _get(e2e, "rest", "stack_percent"), 2.0, "lower", "%")
    burst = _get(e2e, "saturation", "per_s")
    stack = _get(e2e, "stack_cpu", "machine_cpu_ms_per_proposal")
    add("cpu_vs_naive_peer", "Floor: machine CPU per proposal, whole stack to the SSE frame ÷ the in-process naive "
        "peer's (25/run)", _ratio(stack, _get(floors, "naive", "per_run_size", "25", "machine_cpu_ms_per_proposal")),
        None, "floor")
    add("cpu_vs_commit_floor", "Floor: machine CPU per proposal, whole stack to the SSE frame ÷ the commit floor's per "
        "commit", _ratio(stack, _get(floors, "commit", "machine_cpu_ms_per_proposal")), None, "floor")
    for target in compare.targets(e2e):  # the same stack built the obvious way (bench/peer)
        add(target.key, target.name, target.value, target.bound, target.better)
    # Paced = burst: the stack's own CPU per proposal (parts, broker, PostgreSQL; SSE clients on
    # both sides) at each latency load ÷ the whole-stack burst's.
    burst_stack = _get(e2e, "stack_cpu", "stack_cpu_ms_per_proposal")
    paced_steps = _get(e2e, "latency", "steps") or {}
    for load, bound in ((0.3, 1.5), (0.05, 2.0)):
        key = next((k for k in paced_steps if abs(float(k) - load) < 1e-9), str(load))
        add(f"stack_paced_{load * 100:.0f}_vs_burst_cpu", f"Paced: the stack's CPU per proposal at {load:.0%} of the "
            f"burst ÷ in the burst (parts, broker, PostgreSQL; to the SSE frame)",
            _ratio(_get(paced_steps, key, "stack_cpu_ms_per_proposal"), burst_stack), bound, "lower")

    many = e2e.get("many_runs") or {}
    shapes = many.get("shapes") or {}
    counts = [str(n) for n in plan.get("many_runs") or (200, 5000)]
    fewest, most = (min(shapes, key=int), max(shapes, key=int)) if shapes else (counts[0], counts[-1])
    offered = f"offered {float(many.get('load') or plan.get('many_runs_load') or 0.5):g}× the burst"
    drained = _get(shapes, most, "drained_s")
    add("many_runs_drain_s", f"Many runs: {int(most):,} runs in flight, {offered}: the backlog drained, s after "
        f"the window", drained if drained is not None or not shapes else
        (f"not drained ({plan['drain_timeout']:.0f} s after, in a round)" if plan.get("drain_timeout")
         else "not drained"), 5.0, "lower", "s")
    add("many_runs_cpu_ratio", f"Many runs: machine CPU per proposal, {int(most):,} ÷ {int(fewest):,} runs in flight",
        _ratio(_get(shapes, most, "machine_cpu_ms_per_proposal"), _get(shapes, fewest, "machine_cpu_ms_per_proposal")),
        1.2, "lower")

    for target in memory.targets(e2e, plan):  # the hot-state budget under many runs in flight
        add(target.key, target.name, target.value, target.bound, target.better, target.unit)

    over = e2e.get("overload") or {}
    offered = (f"offered {float(over.get('load') or plan.get('overload_load') or 1.2):g}× the burst for "
               f"{_fmt(float(over.get('seconds') or plan.get('overload_seconds') or 60), 0)} s")
    add("overload_vs_burst", f"Overload: {offered}: published during the window ÷ burst saturation",
        _ratio(over.get("in_window_per_s"), over.get("burst_per_s")), 0.9, "higher")
    not_drained = (f"not drained ({', '.join(over.get('still_behind') or ['published'])} behind "
                   f"{_fmt(over.get('deadline_s_after_last_send'), 0)} s after)")
    add("overload_drain_s", f"Overload: {offered}: the backlog drains after the window (s to drain)",
        over.get("drained_s") if over.get("drained_s") is not None or not over else not_drained, None, "drains", "s")
    sustained = _get(e2e, "sustained", "achieved_per_s")
    name = "Overload: sustained paced throughput (highest offered load kept up) ÷ burst saturation"
    if sustained is None and e2e.get("paced"):
        lowest = min(float(r) for r in e2e["paced"])
        add("sustained_vs_burst", name, f"< {_ratio(lowest, burst)} (no step kept up, not even {lowest:.0f}/s)", 0.8,
            "higher")
    else:
        add("sustained_vs_burst", name, _ratio(sustained, burst), 0.8, "higher")

    steps = _get(e2e, "latency", "steps") or {}
    loads = [str(load) for load in plan.get("latency_loads") or (0.05, 0.3)]
    low, high = (min(steps, key=float), max(steps, key=float)) if steps else (loads[0], loads[-1])
    at = f"{float(high):.0%} of the burst"
    clients = _get(e2e, "latency", "sse_clients") or plan.get("latency_runs")
    add("sse_p99_30_vs_5", f"Latency: produce → SSE frame p99 ({clients} SSE clients), at "
        f"{at} ÷ at {float(low):.0%}", _ratio(_get(steps, high, "sse_ms", "p99"), _get(steps, low, "sse_ms", "p99")),
        2.0, "lower")
    add("preview_p99_30_vs_transport", f"Latency: produce → `answer.preview` p99 at {at} ÷ the transport floor's p99 "
        f"at that rate", _ratio(_get(steps, high, "preview_ms", "p99"), _get(e2e, "latency", "transport", "p99")),
        5.0, "lower")

    replay = results.get("replay", {}).get("sizes", {})
    largest = max(replay, key=int) if replay else None
    smallest = min(replay, key=int) if replay else None
    big = replay.get(largest) if largest else None
    events = f"{int(largest):,} events" if largest else "largest log"
    add("replay_vs_raw_read", f"Replay: rate ÷ a raw notification-log read over as many connections as it has workers "
        f"({events}, medians of interleaved rounds)",
        _ratio(_get(big, "replay", "events_per_s"), _get(big, "raw", "events_per_s")), 0.5, "higher")
    add("replay_events_per_s", f"Replay: events/s ({events})", _get(big, "replay", "events_per_s"), 50_000, "higher",
        "events/s")
    add("replay_rss_growth", f"Replay: peak RSS, {events} ÷ {int(smallest):,} events (memory flat with the log)"
        if smallest else "Replay: peak RSS growth with the log (memory flat)",
        _ratio(_get(big, "replay", "peak_rss_mb"), _get(replay.get(smallest) if smallest else None, "replay",
                                                          "peak_rss_mb")), 1.2, "lower")

    growth = e2e.get("run_size", {})
    for part in ("publication", "delivery"):
        small = _get(growth, "25", "cpu_ms_per_proposal", part)
        large = _get(growth, "400", "cpu_ms_per_proposal", part)
        add(f"{part}_cpu_400_vs_25", f"Kept: {part} CPU per proposal, 400/run ÷ 25/run", _ratio(large, small), 1.2,
            "lower")
    aged = e2e.get("source_age", {})
    add("publication_cpu_aged_vs_fresh",
        f"Kept: publication CPU per proposal, a source cited by {_fmt(aged.get('earlier_runs'))} earlier runs ÷ a "
        f"fresh source", _ratio(_get(aged, "aged", "cpu_ms_per_proposal", "publication"),
                                _get(aged, "fresh", "cpu_ms_per_proposal", "publication")), 1.2, "lower")
    fan = e2e.get("fanout", {})
    clients = fan.get("clients") or plan.get("fanout_clients")
    add("fanout_p99_ms", f"Kept: {_fmt(clients)} SSE clients on Delivery, published → client p99",
        _get(fan, "published_to_client_ms", "p99"), 250.0, "lower", "ms")
    add("fanout_rss_mb", f"Kept: {_fmt(clients)} SSE clients on Delivery, its RSS",
        _get(fan, "window", "peak_rss_mb", "delivery"), 300.0, "lower", "MB")
    from bench.rule_timings import targets as rule_targets

    for row in rule_targets(results):
        add(*row)
    return rows


IMPRINT_PROCESSES = ("publication", "relay", "journal", "delivery")


def processes(windows: dict[str, Any]) -> list[str]:
    """Every process some phase's window measured: imprint's parts first, then the others
    (a second instance, the peer's processes) in the order they were first measured."""
    seen = [p for w in windows.values() for p in (*(w.get("cpu_util") or {}), *(w.get("peak_rss_mb") or {}))]
    return ([p for p in IMPRINT_PROCESSES if p in seen]
            + [p for p in dict.fromkeys(seen) if p not in IMPRINT_PROCESSES])


def peak_rss_mb(results: dict[str, Any]) -> dict[str, float]:
    """Each process's highest peak RSS over every phase's window."""
    peaks: dict[str, float] = {}
    for window in (results.get("windows") or {}).values():
        for process, mb in (window.get("peak_rss_mb") or {}).items():
            peaks[process] = max(peaks.get(process, 0.0), mb)
    return peaks


HISTORY = "history.jsonl"
"""One JSON object per run, appended by every ``python -m bench`` that finishes (``history_line``)."""


def history_line(results: dict[str, Any]) -> dict[str, Any]:
    """One run in one line: when, which code, on what, what was measured, and every target's
    value by its key (``targets``) with how many passed. Figures a run did not measure
    (``--only``, a failed section) are left out."""
    code = results.get("code") or {}
    machine = results.get("machine") or {}
    floors = results.get("floors") or {}
    e2e = results.get("e2e") or {}
    replay = (results.get("replay") or {}).get("sizes") or {}
    rows = results.get("targets") or targets(results)
    measured = [row for row in rows if row.get("status") != "n/a"]
    rates = {
        "burst_per_s": _get(e2e, "saturation", "per_s"),
        "commit_floor_per_s": _get(floors, "commit", "per_s"),
        "naive_peer_per_s": _get(floors, "naive", "per_run_size", "25", "per_s"),
        "peer_burst_per_s": _get(e2e, "peer", "burst", "per_s"),
        "sustained_per_s": _get(e2e, "sustained", "achieved_per_s"),
        "overload_per_s": _get(e2e, "overload", "in_window_per_s"),
        "replay_events_per_s": _get(replay, max(replay, key=int), "replay", "events_per_s") if replay else None,
    }
    machine_cpu = {
        "whole_stack": _get(e2e, "stack_cpu", "machine_cpu_ms_per_proposal"),
        "naive_peer": _get(floors, "naive", "per_run_size", "25", "machine_cpu_ms_per_proposal"),
        "commit_floor": _get(floors, "commit", "machine_cpu_ms_per_proposal"),
    }
    paced = compare.imprint_paced(e2e)[1]
    stack_cpu = {  # the stack's own processes, the broker and PostgreSQL, per proposal
        "burst": _get(e2e, "stack_cpu", "stack_cpu_ms_per_proposal"),
        "peer_burst": _get(e2e, "peer", "burst", "stack_cpu_ms_per_proposal"),
        "paced": paced.get("stack_cpu_ms_per_proposal"),
        "peer_paced": _get(e2e, "peer", "paced", "stack_cpu_ms_per_proposal"),
    }
    line: dict[str, Any] = {
        "date": results.get("started_at"),
        "label": results.get("label"),
        "mode": results.get("mode"),
        "commit": code.get("commit"),
        "system_commit": (code.get("system_commit") or "").split(" ", 1)[0] or None,
        "dirty": code.get("dirty") or None,
        "cpu": f"{machine.get('cpu_model')} ×{machine.get('cpus')}" if machine.get("cpu_model") else None,
        "load": [_load(machine.get("loadavg_before")), _load(machine.get("loadavg_after"))],
        "plan_overrides": results.get("plan_overrides") or None,
        "rates": {k: v for k, v in rates.items() if v is not None},
        "machine_cpu_ms": {k: v for k, v in machine_cpu.items() if v is not None} or None,
        "stack_cpu_ms": {k: v for k, v in stack_cpu.items() if v is not None} or None,
        "peak_rss_mb": peak_rss_mb(results) or None,
        "targets": {row.get("key") or row["target"]: row["value"] for row in measured},
        "passed": f"{sum(row['status'] == 'PASS' for row in measured)}/"
                  f"{sum(row['status'] in ('PASS', 'MISS') for row in measured)}",
        "errors": sorted(results.get("errors") or {}) or None,
    }
    return {k: v for k, v in line.items() if v is not None}


def _load(text: Any) -> float | None:
    """The 1-minute load average of a ``/proc/loadavg`` excerpt."""
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return None


def append_history(results: dict[str, Any], out: Path) -> None:
    import json

    with (out / HISTORY).open("a", encoding="utf-8") as history:
        history.write(json.dumps(history_line(results), ensure_ascii=False) + "\n")


def markdown(results: dict[str, Any]) -> str:
    e2e = results.get("e2e", {})
    floors = results.get("floors", {})
    machine = results.get("machine", {})
    label = f" — {results['label']}" if results.get("label") else ""
    out = [f"# imprint benchmark{label} ({results.get('mode')})", ""]
    out.append(f"Run {results.get('started_at')} on `{machine.get('cpu_model')}`, {machine.get('cpus')} cores, "
               f"{machine.get('memory_gb')} GB; code `{results.get('code', {}).get('commit')}` (libs/services at "
               f"`{results.get('code', {}).get('system_commit')}`)"
               f"{' (dirty)' if results.get('code', {}).get('dirty') else ''}. "
               f"Load average before / after: {machine.get('loadavg_before')} / {machine.get('loadavg_after')} "
               f"(other engineers share these 2 cores; each phase records the machine's busy cores).")
    if results.get("plan_overrides"):
        out.append(f"Plan overrides (smaller than the standard full run): {results['plan_overrides']}.")
    seconds = results.get("seconds", {})
    if seconds:
        out.append(f"Wall time per section (s): {seconds}.")
    versions = results.get("versions", {})
    out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    out += ["", "## Targets (the performance issue, per unit of machine CPU)", ""]
    out += targets_table(results.get("targets", []))
    out += ["", "## Throughput", "", "| measure | proposals/s | notes |", "|---|---|---|"]
    if floors.get("commit"):
        out.append(f"| commit floor (INSERT+COMMIT per proposal, psycopg) | {_fmt(_get(floors, 'commit', 'per_s'))} | "
                   f"server {_get(floors, 'commit', 'server')} |")
    paced_commit = _get(floors, "commit", "paced") or {}
    if paced_commit:
        out.append(f"| commit floor paced at {paced_commit.get('offered_per_s')}/s, latency per commit | — | "
                   f"p50/p99/max {_fmt(paced_commit.get('p50'), 1)} / {_fmt(paced_commit.get('p99'), 1)} / "
                   f"{_fmt(paced_commit.get('max'), 1)} ms (one commit, nothing else: the floor under any "
                   f"produce → published latency) |")
    for size, row in (_get(floors, "naive", "per_run_size") or {}).items():
        out.append(f"| naive peer (eventsourcing get+trigger+save), {size}/run | {_fmt(row['per_s'])} | |")
    if _get(floors, "transport", "burst"):
        out.append(f"| transport floor burst (aiokafka produce→consume) | "
                   f"{_fmt(_get(floors, 'transport', 'burst', 'per_s'))} | messages/s |")
    instances = e2e.get("publication_instances") or {}
    for count, row in sorted(instances.items()):
        out.append(f"| imprint burst, {count} Publication instance(s) in one consumer group | {_fmt(row.get('per_s'))} "
                   f"| cpu ms/proposal {row.get('cpu_ms_per_proposal')} |")
    sat = e2e.get("saturation", {})
    spread = " / ".join(_fmt(r.get("per_s")) for r in sat.get("rounds", []))
    out.append(f"| **imprint burst saturation** ({sat.get('per_run')}/run, {sat.get('proposals')} proposals) | "
               f"**{_fmt(sat.get('per_s'))}** | produce → last `answer.published`; the median of rounds "
               f"{spread or '—'} (the machine's spread); every offered load below is a fraction of it |")
    sus = e2e.get("sustained", {})
    if sus:
        out.append(f"| **imprint sustained paced** | **{_fmt(sus.get('achieved_per_s'))}** | highest offered load that "
                   f"kept up: {_fmt(sus.get('offered_per_s'))}/s; first that did not: "
                   f"{_fmt(sus.get('first_failing_offered_per_s'))}/s |")
    over = e2e.get("overload") or {}
    if over:
        out.append(f"| **imprint under overload** (offered {_fmt(over.get('offered_per_s'))}/s for "
                   f"{_fmt(over.get('seconds'), 0)} s) | **{_fmt(over.get('in_window_per_s'))}** | published while the "
                   f"load was offered (sent {_fmt(over.get('sent_per_s'))}/s); the backlog drained "
                   f"{_fmt(over.get('drained_s'), 1)} s after the window (per part: {_drains(over.get('drain_s'))}) |")
    out += machine_cpu_section(results)
    out += compare.markdown(e2e)
    out += many_runs_section(e2e.get("many_runs") or {})

    def trio(d: Any) -> str:
        return "—" if not d or not d.get("n") else f"{_fmt(d['p50'])} / {_fmt(d['p95'])} / {_fmt(d['p99'])}"

    lat = e2e.get("latency") or {}
    steps = sorted((lat.get("steps") or {}).items(), key=lambda kv: float(kv[0]))
    if steps:
        transport = lat.get("transport") or {}
        out += ["", f"## Latency flat with load ({lat.get('runs')} runs, one SSE client on each; open loop, from the "
                "scheduled send)", "",
                f"The transport floor (raw aiokafka produce → consume through the same broker) at "
                f"{_fmt(transport.get('offered_per_s'))}/s, measured in the same section: p50/p95/p99 "
                f"{trio(transport)} ms.", "",
                "| load | offered/s | produce→preview p50/p95/p99 ms | produce→published p50/p95/p99 ms "
                "| produce→SSE p50/p95/p99 ms | achieved/s | keeps up | CPU ms/proposal (publication / journal / delivery) |",
                "|---|---|---|---|---|---|---|---|"]
        for load, row in steps:
            out.append(f"| {float(load):.0%} | {_fmt(row.get('offered_per_s'))} | {trio(row.get('preview_ms'))} | "
                       f"{trio(row.get('published_ms'))} | {trio(row.get('sse_ms'))} | {_fmt(row.get('achieved_per_s'))} "
                       f"| {'yes' if row.get('keeps_up') else 'no'} (slope {row.get('latency_slope')}) | "
                       f"{_parts(row.get('cpu_ms_per_proposal'))} |")
    ladder = sorted((e2e.get("paced") or {}).items(), key=lambda kv: float(kv[0]))
    if ladder:
        out += ["", "## Paced ladder (sustained; runs of 25, one SSE client per run, up to the first step that does not "
                "keep up)", "",
                "| load | offered/s | produce→preview p50/p95/p99 ms | produce→published p50/p95/p99 ms "
                "| produce→SSE p50/p95/p99 ms | achieved/s | drained s after the window | keeps up |",
                "|---|---|---|---|---|---|---|---|"]
        for rate, row in ladder:
            load = row.get("load")
            out.append(f"| {f'{load:.0%}' if load is not None else '—'} | {rate} | {trio(row.get('preview_ms'))} | "
                       f"{trio(row.get('published_ms'))} | {trio(row.get('sse_ms'))} | {_fmt(row.get('achieved_per_s'))} "
                       f"| {_fmt(row.get('drained_s'), 2)} | {'yes' if row.get('keeps_up') else 'no'} "
                       f"(slope {row.get('latency_slope')}) |")
    hopped = [(f"{float(load):.0%} ({_fmt(row.get('offered_per_s'))}/s)", row["hops_ms"])
              for load, row in steps if row.get("hops_ms")]
    hopped += [(f"ladder {rate}/s", row["hops_ms"]) for rate, row in ladder if row.get("hops_ms")]
    if hopped:
        out += ["", "Where the time went, from the Kafka `CreateTime` of each proposal, preview and publication "
                "(p50 / p95 / p99 ms; one clock, every process on this machine):", "",
                "| offered | scheduled → proposal sent (the bench's own lateness) | proposal sent → Publication "
                "sent the preview | preview sent → seen | preview sent → relay sent `answer.published` (commit + relay) "
                "| published sent → seen |",
                "|---|---|---|---|---|---|"]
        for rate, hops in hopped:
            out.append(f"| {rate} | {trio(hops.get('proposal_sent'))} | {trio(hops.get('to_preview_sent'))} | "
                       f"{trio(hops.get('preview_sent_to_seen'))} | {trio(hops.get('preview_to_published_sent'))} | "
                       f"{trio(hops.get('published_sent_to_seen'))} |")
    floor_rates = sorted(set(_get(floors, "transport", "paced") or {}) | set(_get(floors, "consumer", "paced") or {}),
                         key=float)
    if floor_rates:
        out += ["", "## The floors at fixed offered loads", "",
                "The consumer floor is a bare process doing what each part does around a poll and nothing else: poll "
                "(the parts' settings), one PostgreSQL transaction per poll (one INSERT per record, in a worker "
                "thread), one produce per record, the acknowledgements awaited (`bench/floors.py`): what the plumbing "
                "alone costs, to read beside each part's CPU per proposal at a paced load above.", "",
                "| offered/s | transport p50/p95/p99 ms | consumer floor p50/p95/p99 ms | consumer floor cores "
                "(CPU ms/message) |", "|---|---|---|---|"]
        for rate in floor_rates:
            consumer = _get(floors, "consumer", "paced", rate) or {}
            out.append(f"| {rate} | {trio(_get(floors, 'transport', 'paced', rate))} | {trio(consumer)} | "
                       f"{_fmt(consumer.get('cores'), 2)} ({_fmt(consumer.get('cpu_ms_per_message'), 2)}) |")
    out += ["", "## Cost growth (burst; CPU ms per proposal from /proc of each process)", "",
            "| case | proposals/s | publication | relay | journal | delivery | delivery caught up, proposals/s |",
            "|---|---|---|---|---|---|---|"]
    for size, row in sorted((e2e.get("run_size") or {}).items(), key=lambda kv: int(kv[0])):
        cpu = row.get("cpu_ms_per_proposal", {})
        out.append(f"| {size} proposals/run | {_fmt(row.get('per_s'))} | {_fmt(cpu.get('publication'), 2)} | "
                   f"{_fmt(cpu.get('relay'), 2)} | {_fmt(cpu.get('journal'), 2)} | {_fmt(cpu.get('delivery'), 2)} | "
                   f"{_fmt(row.get('delivery_per_s'))} |")
    aged = e2e.get("source_age") or {}
    for case in ("fresh", "aged") if aged else ():
        row = aged.get(case) or {}
        cpu = row.get("cpu_ms_per_proposal", {})
        label = "fresh source" if case == "fresh" else f"source cited by {_fmt(aged.get('earlier_runs'))} earlier runs"
        out.append(f"| {label} | {_fmt(row.get('per_s'))} | {_fmt(cpu.get('publication'), 2)} | "
                   f"{_fmt(cpu.get('relay'), 2)} | {_fmt(cpu.get('journal'), 2)} | {_fmt(cpu.get('delivery'), 2)} | "
                   f"{_fmt(row.get('delivery_per_s'))} |")
    replay = (results.get("replay") or {}).get("sizes") or {}
    if replay:
        workers = (results.get("replay") or {}).get("workers")
        out += ["", "## Replay", "", f"Medians of {(results.get('replay') or {}).get('rounds', 1)} interleaved rounds; "
                f"the raw read uses as many connections as the replay has workers ({workers or '?'}).", "",
                "| log events | raw read events/s | `imprint replay` events/s | replay s | "
                "replay peak RSS MB | note |", "|---|---|---|---|---|---|"]
        for size, row in sorted(replay.items(), key=lambda kv: int(kv[0])):
            rp = row.get("replay", {})
            out.append(f"| {row.get('events'):,} | {_fmt(_get(row, 'raw', 'events_per_s'))} | "
                       f"{_fmt(rp.get('events_per_s'))} | {_fmt(rp.get('seconds'))} | {_fmt(rp.get('peak_rss_mb'))} | "
                       f"{rp.get('stopped') or ''} |")
        out.append("")
        out.append(f"Log built by: {next(iter(replay.values())).get('log', {}).get('method')}.")
    fan = e2e.get("fanout") or {}
    if fan:
        out += ["", "## Delivery fan-out", "",
                f"{fan.get('clients')} SSE clients on one run, {fan.get('proposals')} proposals at "
                f"{fan.get('offered_per_s')}/s: `answer.published` on Kafka → client p50/p95/p99 "
                f"{trio(fan.get('published_to_client_ms'))} ms, missing {fan.get('missing_deliveries')}, "
                f"connect {fan.get('connect_seconds')} s, Delivery peak RSS "
                f"{_get(fan, 'window', 'peak_rss_mb', 'delivery')} MB, Delivery CPU "
                f"{_get(fan, 'window', 'cpu_util', 'delivery')} cores."]
    windows = results.get("windows", {})
    names = processes(windows)
    infra = sorted({n for w in windows.values() for n in w.get("infra_cpu_s") or {}})
    out += ["", "## CPU (cores) and peak RSS (MB) per process, per phase", "",
            "Each process's cores / peak RSS (sampled twice a second) over the phase's window; the broker's and "
            "PostgreSQL's cores (every process of theirs, shared with whatever else used them); the last row is each "
            "process's peak over the run.", "",
            "| phase | " + " | ".join([*names, *(f"{n} cores" for n in infra)]) + " | machine busy cores |",
            "|---|" + "---|" * (len(names) + len(infra) + 1)]
    for phase, window in windows.items():
        util, rss = window.get("cpu_util", {}), window.get("peak_rss_mb", {})
        cells = [f"{_fmt(util.get(p), 2)} / {_fmt(rss.get(p))}" for p in names]
        seconds = window.get("seconds") or 0
        cells += [_fmt(round(window["infra_cpu_s"][n] / seconds, 2) if seconds and n in (window.get("infra_cpu_s")
                                                                                          or {}) else None, 2)
                  for n in infra]
        out.append(f"| {phase} | " + " | ".join(cells) + f" | {window.get('machine_busy_cores')} |")
    if windows:
        peaks = peak_rss_mb(results)
        out.append("| **peak RSS over the run** | " + " | ".join(f"{_fmt(peaks.get(p))}" for p in names)
                   + " |" * (len(infra) + 1) + " |")
    profiles = results.get("profiles") or {}
    if profiles:
        out += ["", "## Profiles at saturation and at a paced load (py-spy, top five)", ""]
        for part, prof in profiles.items():
            if not isinstance(prof, dict) or not prof.get("samples"):
                out.append(f"* {part}: {prof}")
                continue
            out.append(f"**{part}** ({prof['samples']} samples at 100 Hz, {prof.get('waiting', 0):.0%} of them waiting "
                       f"on I/O or locks; shares below are of the on-CPU samples; {prof.get('when')})")
            out.append("")
            out.append("| inclusive | share | self | share |")
            out.append("|---|---|---|---|")
            for a, b in list(zip(prof.get("inclusive", []), prof.get("self", []), strict=False))[:5]:
                out.append(f"| `{a['frame']}` | {a['share']:.0%} | `{b['frame']}` | {b['share']:.0%} |")
            out.append("")
    if results.get("errors"):
        out += ["", "## Failures", ""] + [f"* {k}: {v}" for k, v in results["errors"].items()]
    return "\n".join(out) + "\n"


def targets_table(rows: list[dict[str, Any]], keys: bool = True) -> list[str]:
    """The targets as a Markdown table: ``latest.md``'s, and the README's (``keys=False``)."""
    out = ["| key | target | measured | bound | |" if keys else "| target | measured | bound | |",
           "|---|---|---|---|---|" if keys else "|---|---|---|---|"]
    for row in rows:
        bound = row["bound"]
        if row["better"] == "drains":
            limit = "drains"
        elif row["better"] == "floor":
            limit = "(a floor)"
        else:
            limit = f"{'≥' if row['better'] == 'higher' else '≤'} {_fmt(bound, 2)} {row['unit']}"
        value = ("—" if row["value"] is None else row["value"] if isinstance(row["value"], str)
                 else f"{_fmt(row['value'], 2)} {row['unit']}")
        key = f"| `{row.get('key')}` " if keys else ""
        out.append(f"{key}| {row['target']} | {value} | {limit} | **{row['status']}** |")
    return out


def run_summary(results: dict[str, Any]) -> str:
    """One sentence naming the run every figure of the docs comes from: when, on what, which
    code, the machine's load, and the rates every ratio is taken against."""
    machine, code = results.get("machine") or {}, results.get("code") or {}
    floors, e2e = results.get("floors") or {}, results.get("e2e") or {}
    passed = [row for row in results.get("targets") or [] if row.get("status") != "n/a"]
    return (f"From `bench/results/latest.json` ({results.get('mode')} run of {results.get('started_at')}, "
            f"code `{code.get('commit')}`{' (dirty)' if code.get('dirty') else ''}, {machine.get('cpus')} cores "
            f"`{machine.get('cpu_model')}` shared with other work, load average {_load(machine.get('loadavg_before'))} "
            f"before and {_load(machine.get('loadavg_after'))} after): burst "
            f"{_fmt(_get(e2e, 'saturation', 'per_s'), 0)}/s, naive peer "
            f"{_fmt(_get(floors, 'naive', 'per_run_size', '25', 'per_s'))}/s, commit floor "
            f"{_fmt(_get(floors, 'commit', 'per_s'))}/s; "
            f"{sum(row['status'] == 'PASS' for row in passed)} of {len(passed)} targets met.")


def _trio(d: Any, digits: int = 0) -> str:
    return "—" if not d or not d.get("n") else " / ".join(_fmt(float(d[q]), digits) for q in ("p50", "p95", "p99"))


def _times(value: Any) -> str:
    return "—" if value is None else f"{_fmt(float(value), 2)} ×"


def scaling_figures(results: dict[str, Any]) -> list[str]:
    """What ``docs/scaling.md`` reads its limits from: one row per figure it discusses, each
    straight from the results (``latest.md`` has the full tables)."""
    e2e, floors = results.get("e2e") or {}, results.get("floors") or {}
    burst = _get(e2e, "saturation", "per_s")
    stack = e2e.get("stack_cpu") or {}
    instances = e2e.get("publication_instances") or {}
    steps = _get(e2e, "latency", "steps") or {}
    low, high = (min(steps, key=float), max(steps, key=float)) if steps else (None, None)
    many = _get(e2e, "many_runs", "shapes") or {}
    most_fewest = (max(many, key=int), min(many, key=int)) if many else (None, None)
    fan = e2e.get("fanout") or {}
    over = e2e.get("overload") or {}
    replay = _get(results, "replay", "sizes") or {}
    largest = replay.get(max(replay, key=int)) if replay else {}
    smallest = replay.get(min(replay, key=int)) if replay else {}
    consumer = _get(floors, "consumer", "paced") or {}

    def at(load: Any) -> str:
        return f"{float(load):.0%} of the burst ({_fmt(_get(steps, load, 'offered_per_s'), 0)}/s)" if load else "—"

    def paced_cpu(load: Any) -> str:
        return _parts(_get(steps, load, "cpu_ms_per_proposal")) if load else "—"

    hops = _get(steps, high, "hops_ms") or {}
    rows = [
        ("Burst saturation, runs of 25 (median of rounds; every rate below is a fraction of it)",
         f"{_fmt(burst)}/s ({' / '.join(_fmt(r.get('per_s')) for r in _get(e2e, 'saturation', 'rounds') or [])})"),
        ("CPU ms per proposal in the burst: Publication (with its relay) / Journal / Delivery",
         _parts(_get(e2e, "run_size", "25", "cpu_ms_per_proposal"))),
        ("Whole machine to the SSE frame: CPU ms per proposal, busy cores",
         f"{_fmt(stack.get('machine_cpu_ms_per_proposal'), 2)} ms, "
         f"{_fmt(round(stack['per_s'] * stack['machine_cpu_ms_per_proposal'] / 1000, 2), 2)} cores"
         if stack.get("per_s") and stack.get("machine_cpu_ms_per_proposal") else "—"),
        ("Commit floor (one connection, INSERT + COMMIT): rate, machine CPU ms per commit",
         f"{_fmt(_get(floors, 'commit', 'per_s'))}/s, "
         f"{_fmt(_get(floors, 'commit', 'machine_cpu_ms_per_proposal'), 2)} ms"),
        ("Naive eventsourcing peer, 25/run: rate, machine CPU ms per proposal",
         f"{_fmt(_get(floors, 'naive', 'per_run_size', '25', 'per_s'))}/s, "
         f"{_fmt(_get(floors, 'naive', 'per_run_size', '25', 'machine_cpu_ms_per_proposal'), 2)} ms"),
        ("Burst with 2 Publication instances on the same machine ÷ with 1",
         _times(_ratio(_get(instances, "2", "per_s"), _get(instances, "1", "per_s")))),
        ("CPU per proposal, runs of 400 ÷ runs of 25: Publication / Delivery",
         " / ".join(_times(_ratio(_get(e2e, "run_size", "400", "cpu_ms_per_proposal", part),
                                  _get(e2e, "run_size", "25", "cpu_ms_per_proposal", part)))
                    for part in ("publication", "delivery"))),
        (f"Publication CPU per proposal, a source cited by {_fmt(_get(e2e, 'source_age', 'earlier_runs'))} earlier "
         "runs ÷ a fresh one",
         _times(_ratio(_get(e2e, "source_age", "aged", "cpu_ms_per_proposal", "publication"),
                       _get(e2e, "source_age", "fresh", "cpu_ms_per_proposal", "publication")))),
        ("Sustained paced load (highest step kept up) ÷ burst; first step that did not keep up",
         f"{_times(_ratio(_get(e2e, 'sustained', 'achieved_per_s'), burst))}; "
         f"{_fmt(_get(e2e, 'sustained', 'first_failing_offered_per_s'))}/s"),
        (f"Produce → preview, p50 / p95 / p99 ms, at {at(low)}; at {at(high)}",
         f"{_trio(_get(steps, low, 'preview_ms'))}; {_trio(_get(steps, high, 'preview_ms'))}"),
        (f"Produce → SSE frame, p50 / p95 / p99 ms, at {at(low)}; at {at(high)}",
         f"{_trio(_get(steps, low, 'sse_ms'))}; {_trio(_get(steps, high, 'sse_ms'))}"),
        (f"At {at(high)}, p50 ms: proposal → preview sent (Publication's poll), preview → `answer.published` sent "
         "(commit + relay), published → seen by a reader",
         " / ".join(_fmt(_get(hops, hop, "p50"), 0) for hop in
                    ("to_preview_sent", "preview_to_published_sent", "published_sent_to_seen"))),
        (f"CPU ms per proposal paced, Publication / Journal / Delivery, at {at(low)}; at {at(high)}",
         f"{paced_cpu(low)}; {paced_cpu(high)}"),
        ("Consumer floor (a bare poll → transaction → produce loop), busy cores at "
         + " / ".join(f"{rate}/s" for rate in sorted(consumer, key=float)),
         " / ".join(_fmt(_get(consumer, rate, "cores"), 2) for rate in sorted(consumer, key=float)) or "—"),
        (f"Many runs in flight ({' and '.join(f'{int(n):,}' for n in sorted(many, key=int))}): drained s after the "
         "window; machine CPU per proposal, most ÷ fewest",
         f"{' / '.join(_fmt(_get(many, n, 'drained_s'), 2) for n in sorted(many, key=int))}; "
         f"{_times(_ratio(*(_get(many, n, 'machine_cpu_ms_per_proposal') for n in most_fewest)))}"),
        (f"Overload at {_fmt(over.get('load') or _get(results, 'plan', 'overload_load'))} × the burst: published "
         "during the window ÷ burst; drained s after",
         f"{_times(_ratio(over.get('in_window_per_s'), over.get('burst_per_s') or burst))}; "
         f"{_fmt(over.get('drained_s'), 1)}"),
        (f"{_fmt(fan.get('clients'))} SSE clients on one run: published → client p99 ms, Delivery peak RSS MB, "
         "Delivery cores",
         f"{_fmt(_get(fan, 'published_to_client_ms', 'p99'), 0)}, "
         f"{_fmt(_get(fan, 'window', 'peak_rss_mb', 'delivery'))}, "
         f"{_fmt(_get(fan, 'window', 'cpu_util', 'delivery'), 2)}"),
        (f"`imprint replay`, {_fmt(largest.get('events'))} events: events/s, ÷ a raw read of the table, replay "
         "CPU s, peak RSS MB (÷ the smaller log's)",
         f"{_fmt(_get(largest, 'replay', 'events_per_s'))}, "
         f"{_times(_ratio(_get(largest, 'replay', 'events_per_s'), _get(largest, 'raw', 'events_per_s')))}, "
         f"{_fmt(_get(largest, 'replay', 'cpu_s'))}, {_fmt(_get(largest, 'replay', 'peak_rss_mb'))} "
         f"({_times(_ratio(_get(largest, 'replay', 'peak_rss_mb'), _get(smallest, 'replay', 'peak_rss_mb')))})"),
    ]
    out = ["| measure | latest |", "|---|---|"]
    out += [f"| {name} | {value} |" for name, value in rows]
    return out


def _legend(axis: Any) -> None:
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7)


def plots(results: dict[str, Any], prefix: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    written = []
    e2e = results.get("e2e", {})
    floors = results.get("floors", {})
    label = results.get("label") or "latest"
    samples = results.get("samples", {})
    # 1. latency CDF
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in sorted(samples.items()):
        if values:
            ordered = sorted(values)
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction of proposals")
    ax.set_title(f"Latency CDF — {label}")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    fig.savefig(f"{prefix}-latency-cdf.png", dpi=110)
    plt.close(fig)
    written.append(f"{prefix}-latency-cdf.png")
    # 2. throughput against offered load
    fig, ax = plt.subplots(figsize=(7, 4.5))
    paced = sorted((float(r), row) for r, row in (e2e.get("paced") or {}).items())
    if paced:
        xs = [r for r, _ in paced]
        ax.plot(xs, [row.get("achieved_per_s") or 0 for _, row in paced], "o-", label="imprint achieved (paced)")
        ax.plot(xs, xs, ":", color="grey", label="offered")
    others = [(f"{float(load):.0%} of the burst, {row.get('runs')} runs", row)
              for load, row in (_get(e2e, "latency", "steps") or {}).items()]
    others += [(f"{int(runs):,} runs in flight", row) for runs, row in (_get(e2e, "many_runs", "shapes") or {}).items()]
    others += [("overload", e2e["overload"])] if e2e.get("overload") else []
    for name, row in others:  # published while the load was offered
        if row.get("offered_per_s") and row.get("in_window_per_s"):
            ax.plot([row["offered_per_s"]], [row["in_window_per_s"]], "x", label=f"{name} (during the window)")
    for name, value, style in (("burst saturation", _get(e2e, "saturation", "per_s"), "--"),
                               ("commit floor", _get(floors, "commit", "per_s"), "-."),
                               ("naive peer 25/run", _get(floors, "naive", "per_run_size", "25", "per_s"), ":")):
        if value:
            ax.axhline(value, linestyle=style, label=f"{name} {value:,.0f}/s", alpha=0.7)
    ax.set_xlabel("offered proposals/s")
    ax.set_ylabel("completed proposals/s")
    ax.set_title(f"Throughput against offered load — {label}")
    ax.grid(True, alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    fig.savefig(f"{prefix}-throughput.png", dpi=110)
    plt.close(fig)
    written.append(f"{prefix}-throughput.png")
    # 3. cost against run size
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    sizes = sorted((int(s), row) for s, row in (e2e.get("run_size") or {}).items())
    if sizes:
        xs = [s for s, _ in sizes]
        for part in ("publication", "relay", "journal", "delivery"):
            left.plot(xs, [row.get("cpu_ms_per_proposal", {}).get(part, 0) for _, row in sizes], "o-", label=part)
        right.plot(xs, [row.get("per_s") or 0 for _, row in sizes], "o-", label="publication (to answer.published)")
        right.plot(xs, [row.get("delivery_per_s") or 0 for _, row in sizes], "s-", label="delivery caught up")
    for axis in (left, right):
        axis.set_xscale("log")
        axis.set_xticks([25, 100, 400], ["25", "100", "400"])
        axis.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        axis.set_xlabel("proposals per run")
        axis.grid(True, alpha=0.3)
        _legend(axis)
    left.set_ylabel("CPU ms per proposal")
    right.set_ylabel("proposals/s")
    fig.suptitle(f"Cost against run size — {label}")
    fig.tight_layout()
    fig.savefig(f"{prefix}-cost.png", dpi=110)
    plt.close(fig)
    written.append(f"{prefix}-cost.png")
    return written


def machine_cpu_per_proposal(window: dict[str, Any] | None, proposals: Any) -> float | None:
    """Core-milliseconds the whole machine was busy per proposal over a stack window."""
    if not window or not proposals or window.get("machine_busy_cores") is None:
        return None
    return round(window["machine_busy_cores"] * window["seconds"] * 1000 / proposals, 3)


def machine_cpu_section(results: dict[str, Any]) -> list[str]:
    """The throughputs per unit of the machine's CPU: what each costs the whole machine
    (every process, kernel included, from /proc/stat) per proposal, so a reader can tell a
    figure bound by CPU from one bound by a wait, on this machine or one with more cores."""
    floors, e2e = results.get("floors", {}), results.get("e2e", {})
    saturation, stack = e2e.get("saturation") or {}, e2e.get("stack_cpu") or {}
    over = e2e.get("overload") or {}
    rows = [
        ("commit floor", _get(floors, "commit", "per_s"), _get(floors, "commit", "machine_cpu_ms_per_proposal"),
         "one connection: the client and its server backend, waiting on each fsync"),
        ("naive peer, 25/run", _get(floors, "naive", "per_run_size", "25", "per_s"),
         _get(floors, "naive", "per_run_size", "25", "machine_cpu_ms_per_proposal"),
         "one Python thread and its server backends"),
        ("**imprint, whole stack to the SSE frame** (burst, one SSE client per run)", stack.get("per_s"),
         stack.get("machine_cpu_ms_per_proposal"),
         f"Kafka, PostgreSQL, Publication, the Journal, Delivery, {stack.get('sse_clients')} SSE clients and the "
         "producer; the bench's Kafka reader paused; the median of rounds "
         + " / ".join(_fmt(r.get("machine_cpu_ms_per_proposal"), 2) for r in stack.get("rounds", []))),
        ("imprint, the same until every part caught up", None, stack.get("drained_machine_cpu_ms_per_proposal"),
         "the Journal and Delivery's other topics trail the frames"),
        ("imprint, the same window: its parts' and the bench's processes alone", None,
         stack.get("processes_cpu_ms_per_proposal"),
         "utime+stime from /proc of Publication, the Journal, Delivery and the bench (producer, SSE clients): "
         "no broker, no PostgreSQL, nobody else's work; a lower bound that a shared machine does not inflate"),
        ("imprint burst, to the last `answer.published`", saturation.get("per_s"),
         machine_cpu_per_proposal(saturation.get("publication_window"), saturation.get("proposals")),
         "no SSE client; the bench's Kafka reader reads every preview and publication"),
        ("imprint burst, until Delivery caught up", saturation.get("delivery_per_s"),
         machine_cpu_per_proposal(saturation.get("delivery_window"), saturation.get("proposals")),
         "the same, with every frame stored for SSE"),
        (f"imprint overloaded ({_fmt(over.get('offered_per_s'))}/s offered), until drained", over.get("in_window_per_s"),
         over.get("machine_cpu_ms_per_proposal"), "no SSE client"),
    ]
    if all(cpu is None for _, _, cpu, _ in rows):
        return []
    out = ["", "## Machine CPU per proposal (every process, from /proc/stat)", "",
           "| measure | proposals/s | machine CPU ms/proposal | busy cores | what runs |", "|---|---|---|---|---|"]
    for name, per_s, cpu, what in rows:
        if cpu is None:
            continue
        cores = round(per_s * cpu / 1000, 2) if per_s and cpu else None
        out.append(f"| {name} | {_fmt(per_s)} | {_fmt(cpu, 2)} | {_fmt(cores, 2)} | {what} |")
    out += ["", "Busy core-seconds of the whole machine over each window ÷ proposals: other engineers' work on "
            "the machine lands in it too (the *machine busy cores* of each phase's window below say how much)."]
    return out


def many_runs_section(many: dict[str, Any]) -> list[str]:
    shapes = sorted((many.get("shapes") or {}).items(), key=lambda kv: int(kv[0]))
    if not shapes:
        return []
    out = ["", f"## Many runs in flight (offered {_fmt(many.get('offered_per_s'))}/s, {_fmt(many.get('load'), 2)}× "
           f"the burst, {_fmt(many.get('proposals'))} proposals over {_fmt(many.get('seconds'))} s; no SSE client)", "",
           "| runs in flight | published in the window, /s | drained s after the window (each round) | "
           "drained per part, s | machine CPU ms/proposal (each round) | the parts' and the bench's CPU ms/proposal | "
           "CPU ms/proposal (publication / journal / delivery) | runs admitted in, s |",
           "|---|---|---|---|---|---|---|---|"]
    for runs, row in shapes:
        rounds = row.get("rounds") or []
        out.append(f"| {int(runs):,} | {_fmt(row.get('in_window_per_s'))} | {_fmt(row.get('drained_s'), 2)} ("
                   + " / ".join(_fmt(r.get("drained_s"), 2) for r in rounds) + f") | {_drains(row.get('drain_s'))} | "
                   f"{_fmt(row.get('machine_cpu_ms_per_proposal'), 2)} ("
                   + " / ".join(_fmt(r.get("machine_cpu_ms_per_proposal"), 2) for r in rounds)
                   + f") | {_fmt(row.get('processes_cpu_ms_per_proposal'), 2)} | "
                   f"{_parts(row.get('cpu_ms_per_proposal'))} | {_fmt(row.get('admit_seconds'))} |")
    return out


if __name__ == "__main__":
    import sys

    for argument in sys.argv[1:]:
        rerender(Path(argument))

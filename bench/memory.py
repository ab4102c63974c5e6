"""The memory budget under many runs in flight: ``memory_load`` (0.5) of the burst rate
spread over ``memory_runs`` (20,000) runs of ``memory_per_run`` (4) proposals each. Every
part must stay within its hot-state budget (``IMPRINT_HOT_STATE_BYTES``) plus
:data:`RSS_ALLOWANCE_MB` of peak RSS, and keep up: published in the window ≥
:data:`KEPT_UP` × offered, the backlog drained ≤ :data:`DRAINED_S` after it."""

from __future__ import annotations

from typing import Any, NamedTuple

RSS_ALLOWANCE_MB = 150
"""What a part may take beyond its hot state: the interpreter, its libraries, a poll's
records, the connection pools, the allocator's slack."""
KEPT_UP = 0.98
DRAINED_S = 5.0


class Target(NamedTuple):
    key: str
    name: str
    value: float | str | None
    bound: float | None
    better: str
    unit: str = "×"


async def memory(ctx: Any) -> None:
    """Offer the load over the runs (admitted first, no SSE clients: Delivery's hot runs are
    what is weighed here, its streams are the fan-out phase's); record each part's peak RSS
    beside the budget it was given."""
    from bench.phases import sources

    plan, burst = ctx.plan, ctx.burst_rate()
    rate = plan.memory_load * burst
    proposals = plan.memory_runs * plan.memory_per_run
    seconds = proposals / rate
    ctx.say(f"memory: {proposals:,} proposals over {plan.memory_runs:,} runs in flight, offered "
            f"{plan.memory_load:.0%} of the burst ({rate:.0f}/s, {seconds:.0f} s)")
    row = await ctx.paced("memory", rate, seconds, plan.memory_runs, clients=False, drain=plan.drain_timeout)
    row.pop("_samples", None)
    budget_mb = round(ctx.settings.hot_state_bytes / 2**20, 1)
    peaks = (row.get("drained_window") or row.get("window") or {}).get("peak_rss_mb") or {}
    row.update(runs=plan.memory_runs, per_run=plan.memory_per_run, load=plan.memory_load, burst_per_s=burst,
               budget_mb=budget_mb, peak_rss_mb=peaks)
    ctx.e2e["memory"] = row
    ctx.windows[f"memory: {plan.memory_runs:,} runs in flight ({rate:.0f}/s)"] = row["window"]
    ctx.say(f"  peak RSS {peaks} MB against a budget of {budget_mb} MB + {RSS_ALLOWANCE_MB}")


def targets(e2e: dict[str, Any], plan: dict[str, Any]) -> list[Target]:
    """Each part's peak RSS ≤ its budget + :data:`RSS_ALLOWANCE_MB`; published in the window
    ≥ :data:`KEPT_UP` × offered; drained ≤ :data:`DRAINED_S`."""
    row = e2e.get("memory") or {}
    runs = int(row.get("runs") or plan.get("memory_runs") or 20_000)
    at = f"Memory: {runs:,} runs in flight"
    budget = row.get("budget_mb")
    bound = budget + RSS_ALLOWANCE_MB if budget is not None else None
    out = [Target(f"memory_rss_{part}_mb", f"{at}: {part}'s peak RSS, MB (its hot-state budget + "
                  f"{RSS_ALLOWANCE_MB})", mb, bound, "lower", "MB")
           for part, mb in sorted((row.get("peak_rss_mb") or {}).items())]
    if not out:
        out.append(Target("memory_rss_mb", f"{at}: every part's peak RSS, MB (its hot-state budget + "
                          f"{RSS_ALLOWANCE_MB})", None, bound, "lower", "MB"))
    offered, published = row.get("offered_per_s"), row.get("in_window_per_s")
    kept = round(published / offered, 3) if offered and published is not None else None
    out.append(Target("memory_published_vs_offered", f"{at}: published in the window ÷ offered", kept, KEPT_UP,
                      "higher"))
    drained = row.get("drained_s")
    out.append(Target("memory_drain_s", f"{at}: the backlog drained, s after the window",
                      drained if drained is not None or not row else "not drained", DRAINED_S, "lower", "s"))
    return out

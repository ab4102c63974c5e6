"""Percentiles and trends of the samples a measurement takes."""

from __future__ import annotations

import statistics
from typing import Any


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def latency_summary(samples_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"n": 0}
    return {"n": len(ordered), "p50": round(percentile(ordered, 50), 2), "p95": round(percentile(ordered, 95), 2),
            "p99": round(percentile(ordered, 99), 2), "max": round(ordered[-1], 2),
            "mean": round(statistics.fmean(ordered), 2)}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 when undefined)."""
    if len(xs) < 3:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def median_of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One burst's figures from several rounds of it, interleaved with the bursts it is
    compared with (so the machine's drift over a few minutes falls on both sides): the
    round whose throughput is the median (its windows and timings), with the throughputs
    (to the last ``answer.published``; until Delivery caught up) and each part's CPU per
    proposal the medians over the rounds, and every round's figures kept under
    ``rounds``. A throughput is ``None`` when a round did not complete."""
    ordered = sorted(rounds, key=lambda row: row.get("per_s") or 0.0)
    row = dict(ordered[(len(ordered) - 1) // 2])
    parts = sorted({part for r in rounds for part in r.get("cpu_ms_per_proposal", {})})
    row["cpu_ms_per_proposal"] = {
        part: round(statistics.median(r["cpu_ms_per_proposal"][part] for r in rounds
                                      if part in r.get("cpu_ms_per_proposal", {})), 3) for part in parts}
    for rate in ("per_s", "delivery_per_s"):
        rates = [r[rate] for r in rounds if r.get(rate) is not None]
        row[rate] = round(statistics.median(rates), 1) if rates and len(rates) == len(rounds) else None
    row["rounds"] = [{"per_s": r.get("per_s"), "cpu_ms_per_proposal": r.get("cpu_ms_per_proposal"),
                      "delivery_per_s": r.get("delivery_per_s")} for r in rounds]
    return row

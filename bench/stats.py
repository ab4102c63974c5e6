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


def median_of_rounds(rounds: list[dict[str, Any]], rate: str = "per_s",
                     figures: tuple[str, ...] = ("per_s", "delivery_per_s")) -> dict[str, Any]:
    """One burst's figures from several rounds of it, interleaved with the bursts it is
    compared with (so the machine's drift over a few minutes falls on both sides): the
    round whose throughput (``rate``) is the median (its windows and timings), with the
    ``figures`` (by default the throughputs to the last ``answer.published`` and until
    Delivery caught up) and each part's CPU per proposal the medians over the rounds, and
    every round's figures kept under ``rounds``. A figure is ``None`` when a round has none
    (a throughput: did not complete)."""
    ordered = sorted(rounds, key=lambda row: row.get(rate) or 0.0)
    row = dict(ordered[(len(ordered) - 1) // 2])
    parts = sorted({part for r in rounds for part in r.get("cpu_ms_per_proposal", {})})
    row["cpu_ms_per_proposal"] = {
        part: round(statistics.median(r["cpu_ms_per_proposal"][part] for r in rounds
                                      if part in r.get("cpu_ms_per_proposal", {})), 3) for part in parts}
    for figure in figures:
        values = [r[figure] for r in rounds if r.get(figure) is not None]
        row[figure] = round(statistics.median(values), 3) if values and len(values) == len(rounds) else None
    row["rounds"] = [{"cpu_ms_per_proposal": r.get("cpu_ms_per_proposal"), **{f: r.get(f) for f in figures}}
                     for r in rounds]
    return row

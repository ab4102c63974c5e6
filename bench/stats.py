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

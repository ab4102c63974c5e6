"""imprint's stack against the peer, from one run's results: the issue's three targets and
the table that shows where each stack's CPU goes. Pure: reads the results, measures nothing.

imprint's side is what the ``cpu`` phase (a burst to the last SSE frame, one client per
run) and the ``latency`` phase's lowest load (5 % of imprint's burst) measured; the peer's
is what ``peer`` measured with the same proposals, runs, clients and rate. CPU per proposal
is the *stack's*: each stack's own processes, the broker and PostgreSQL (``stack_cpu_s`` of
a :class:`bench.procs.Stack` window), apart from the bench's producer and SSE clients."""

from __future__ import annotations

from typing import Any, NamedTuple


class Target(NamedTuple):
    key: str
    name: str
    value: float | None
    bound: float
    better: str


BURST_CPU_BOUND = 0.25
PACED_CPU_BOUND = 0.5
PACED_SSE_P99_BOUND = 1.0


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b in (None, 0):
        return None
    return round(a / b, 3)


def imprint_paced(e2e: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The latency phase's lowest load (its key, e.g. ``"0.05"``) and its row."""
    steps = (e2e.get("latency") or {}).get("steps") or {}
    if not steps:
        return None, {}
    low = min(steps, key=float)
    return low, steps[low]


def peer_paced(e2e: dict[str, Any]) -> dict[str, Any]:
    return (e2e.get("peer") or {}).get("paced") or {}


def targets(e2e: dict[str, Any]) -> list[Target]:
    """The stack's burst CPU per proposal ≤ 0.25× the peer's; at the same paced rate its CPU
    per proposal ≤ 0.5× the peer's and its produce → SSE frame p99 no worse than the peer's.
    A paced comparison whose two loads differ (one of them from an older run) is ``None``."""
    peer = e2e.get("peer") or {}
    low, mine = imprint_paced(e2e)
    theirs = peer_paced(e2e)
    same_rate = bool(mine) and bool(theirs) and theirs.get("offered_per_s") == mine.get("offered_per_s")
    at = f"{float(low):.0%} of imprint's burst" if low else "5% of imprint's burst"
    return [
        Target("stack_vs_peer_burst_cpu", "Peer: the stack's CPU per proposal in a burst (parts, broker, PostgreSQL; "
               "to the last SSE frame) ÷ the peer stack's",
               _ratio((e2e.get("stack_cpu") or {}).get("stack_cpu_ms_per_proposal"),
                      (peer.get("burst") or {}).get("stack_cpu_ms_per_proposal")), BURST_CPU_BOUND, "lower"),
        Target("stack_vs_peer_paced_cpu", f"Peer: the stack's CPU per proposal paced at {at} ÷ the peer stack's at "
               "that rate", _ratio(mine.get("stack_cpu_ms_per_proposal"), theirs.get("stack_cpu_ms_per_proposal"))
               if same_rate else None, PACED_CPU_BOUND, "lower"),
        Target("stack_vs_peer_sse_p99", f"Peer: produce → SSE frame p99 paced at {at}, imprint ÷ the peer",
               _ratio((mine.get("sse_ms") or {}).get("p99"), (theirs.get("sse_ms") or {}).get("p99"))
               if same_rate else None, PACED_SSE_P99_BOUND, "lower"),
    ]


def rows(e2e: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """The four rows measured: each stack in the burst and paced."""
    _, mine = imprint_paced(e2e)
    peer = e2e.get("peer") or {}
    return [("imprint, burst", e2e.get("stack_cpu")), ("peer, burst", peer.get("burst")),
            ("imprint, paced", mine or None), ("peer, paced", peer.get("paced"))]


def per_proposal(row: dict[str, Any]) -> dict[str, float]:
    """CPU ms per proposal of each process of a row's window: its parts, the broker and
    PostgreSQL, and the bench (producer and SSE clients) apart."""
    window = row.get("window") or {}
    count = row.get("proposals") or 0
    if not count:
        return {}
    cpu = {**(window.get("cpu_s") or {}), **(window.get("infra_cpu_s") or {})}
    if window.get("bench_cpu_s") is not None:
        cpu["bench"] = window["bench_cpu_s"]
    return {name: round(seconds * 1000 / count, 3) for name, seconds in cpu.items()}


def net_of_servers_load(row: dict[str, Any], idle: dict[str, float] | None) -> float | None:
    """A row's stack CPU per proposal less what the broker and PostgreSQL were busy with
    neither stack running (``idle``, cores) over the row's window: an estimate of the stack's
    own share on a machine others use, never below the stack's own processes' figure."""
    window = row.get("window") or {}
    stack, count, seconds = row.get("stack_cpu_ms_per_proposal"), row.get("proposals"), window.get("seconds")
    if stack is None or not count or not seconds or not idle:
        return None
    own = sum((window.get("cpu_s") or {}).values()) * 1000 / count
    return round(max(own, stack - sum(idle.values()) * seconds * 1000 / count), 3)


def markdown(e2e: dict[str, Any]) -> list[str]:
    """The section of ``latest.md``: each stack's rate, CPU per proposal (the stack, the
    machine, each process) and produce → SSE frame latency, burst and paced."""
    measured = [(name, row) for name, row in rows(e2e) if row]
    if not (e2e.get("peer") or {}):
        return []
    idle = (e2e.get("peer") or {}).get("servers_cores_without_either_stack")

    def fmt(value: Any, digits: int = 2) -> str:
        return "—" if value is None else f"{value:,.{digits}f}" if isinstance(value, float) else str(value)

    out = ["", "## imprint against the peer (the same stack built the obvious way; `bench/peer`)", "",
           "The peer: a FastStream subscriber taking one message per call → an eventsourcing `Application` on "
           "PostgreSQL (`repository.get` + one event + `save` per proposal) → one awaited publish per block → a "
           "second one-message subscriber doing one psycopg `INSERT` + `NOTIFY` per frame → SSE (FastAPI, "
           "sse-starlette, uvicorn) from `LISTEN`, one client per run; the same proposals, runs and SSE clients as "
           "imprint's rows. The stack's CPU counts its processes, the broker and PostgreSQL; the bench (producer, "
           "SSE clients) apart; each stack runs alone (the other's processes stopped).", "",
           "| stack, load | proposals | proposals/s (offered) | stack CPU ms/proposal | the same, net of the "
           "servers' other load | machine CPU ms/proposal | SSE p50 / p99 ms | CPU ms/proposal per process |",
           "|---|---|---|---|---|---|---|---|"]
    for name, row in measured:
        assert row is not None
        rate = row.get("per_s") if "burst" in name else row.get("offered_per_s")
        sse = row.get("sse_ms") or {}
        processes = ", ".join(f"{p} {fmt(v)}" for p, v in per_proposal(row).items())
        out.append(f"| {name} | {row.get('proposals')} | {fmt(rate, 1)} | {fmt(row.get('stack_cpu_ms_per_proposal'))} "
                   f"| {fmt(net_of_servers_load(row, idle))} | {fmt(row.get('machine_cpu_ms_per_proposal'))} | {fmt(sse.get('p50'), 1)} / "
                   f"{fmt(sse.get('p99'), 1)} | {processes} |")
    paced = peer_paced(e2e)
    if paced and not paced.get("complete"):
        out += ["", f"**The peer did not keep up at {paced.get('offered_per_s')}/s**: "
                f"{paced.get('sse_unfinished_at_deadline')} of {paced.get('proposals')} proposals had no frame by the "
                "deadline (counted with the time waited, a lower bound)."]
    if idle:
        out += ["", "With neither stack running, the broker and PostgreSQL were busy "
                + ", ".join(f"{name} {fmt(cores)}" for name, cores in idle.items())
                + " cores: the machine's other users, in every stack figure above too; the *net* column takes that "
                "load out over each window (an estimate; the targets are judged on the stack's figure). imprint's "
                "paced window ends once every part has committed its offsets, the peer's at its last frame; both "
                "paced loads are read by a Kafka reader of the stack's output as well as by the SSE clients."]
    out += ["", "The in-process naive peer and the commit floor stay as floors (above)."]
    return out

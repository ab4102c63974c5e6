"""The bench's comparison with the peer (``bench.peer``): the three targets read from one
run's results, the stack's CPU counted per process, the broker and PostgreSQL found by the
port they listen on, and the peer's proposals carried as imprint's payloads propose them.
No broker, no database: the bench's arithmetic and the peer's pure parts."""

from __future__ import annotations

import os
import socket
from typing import Any

from bench import report
from bench.peer import compare
from bench.peer.publication import Run, blocks_of, proposal
from bench.procs import cpu_seconds, listener_pid, tree_cpu_seconds
from bench.workload import typical_part


def window(parts: dict[str, float], infra: dict[str, float], bench: float = 1.0) -> dict[str, Any]:
    return {"seconds": 10.0, "cpu_s": parts, "infra_cpu_s": infra, "bench_cpu_s": bench,
            "stack_cpu_s": sum(parts.values()) + sum(infra.values()), "machine_cpu_s": 20.0,
            "cpu_util": {p: c / 10 for p, c in parts.items()}, "peak_rss_mb": {p: 100.0 for p in parts}}


def e2e(imprint_burst: float, peer_burst: float, imprint_paced: float, peer_paced: float, imprint_p99: float,
        peer_p99: float, peer_rate: float = 42.0) -> dict[str, Any]:
    return {
        "stack_cpu": {"proposals": 2000, "stack_cpu_ms_per_proposal": imprint_burst,
                      "window": window({"publication": 2.0}, {"kafka": 0.4, "postgresql": 1.6})},
        "latency": {"steps": {
            "0.3": {"offered_per_s": 252.0, "stack_cpu_ms_per_proposal": 1.0, "sse_ms": {"p99": 1.0}},
            "0.05": {"offered_per_s": 42.0, "proposals": 1260, "stack_cpu_ms_per_proposal": imprint_paced,
                     "sse_ms": {"p50": 20.0, "p99": imprint_p99}}}},
        "peer": {"burst": {"stack_cpu_ms_per_proposal": peer_burst},
                 "paced": {"offered_per_s": peer_rate, "stack_cpu_ms_per_proposal": peer_paced,
                           "sse_ms": {"p99": peer_p99}}},
    }


def test_each_target_is_imprint_over_the_peer_at_the_lowest_paced_load() -> None:
    found = {t.key: t for t in compare.targets(e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0))}
    assert found["stack_vs_peer_burst_cpu"].value == round(2.0 / 6.5, 3)
    assert found["stack_vs_peer_paced_cpu"].value == round(14.9 / 9.7, 3)
    assert found["stack_vs_peer_sse_p99"].value == round(60.0 / 17.0, 3)
    assert [t.bound for t in found.values()] == [0.25, 0.5, 1.0]


def test_the_targets_pass_and_miss_on_their_bounds_and_the_floors_judge_nothing() -> None:
    results = {"e2e": e2e(1.0, 6.5, 4.0, 9.7, 17.0, 17.0), "floors": {
        "naive": {"per_run_size": {"25": {"machine_cpu_ms_per_proposal": 5.0}}},
        "commit": {"machine_cpu_ms_per_proposal": 0.5}}}
    results["e2e"]["stack_cpu"]["machine_cpu_ms_per_proposal"] = 2.0
    rows = {row["key"]: row for row in report.targets(results)}
    assert rows["stack_vs_peer_burst_cpu"]["status"] == "PASS"  # 0.154 ≤ 0.25
    assert rows["stack_vs_peer_paced_cpu"]["status"] == "PASS"  # 0.412 ≤ 0.5
    assert rows["stack_vs_peer_sse_p99"]["status"] == "PASS"  # equal p99s are no worse
    assert rows["cpu_vs_naive_peer"]["status"] == rows["cpu_vs_commit_floor"]["status"] == "floor"
    line = report.history_line({**results, "targets": list(rows.values())})
    assert line["targets"]["cpu_vs_naive_peer"] == 0.4  # reported ...
    judged = [row for row in rows.values() if row["status"] in ("PASS", "MISS")]
    assert line["passed"] == f"{sum(r['status'] == 'PASS' for r in judged)}/{len(judged)}"  # ... not judged
    assert line["stack_cpu_ms"] == {"burst": 1.0, "peer_burst": 6.5, "paced": 4.0, "peer_paced": 9.7}

    missed = {row["key"]: row["status"] for row in report.targets({"e2e": e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0)})}
    assert missed["stack_vs_peer_burst_cpu"] == missed["stack_vs_peer_paced_cpu"] == "MISS"
    assert missed["stack_vs_peer_sse_p99"] == "MISS"


def test_a_paced_comparison_at_another_rate_than_imprints_is_not_made() -> None:
    found = {t.key: t for t in compare.targets(e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0, peer_rate=40.0))}
    assert found["stack_vs_peer_paced_cpu"].value is None
    assert found["stack_vs_peer_sse_p99"].value is None
    assert found["stack_vs_peer_burst_cpu"].value is not None
    assert all(t.value is None for t in compare.targets({}))


def test_cpu_per_proposal_counts_each_process_the_broker_and_postgresql_and_the_bench_apart() -> None:
    row = e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0)["stack_cpu"]
    assert compare.per_proposal(row) == {"publication": 1.0, "kafka": 0.2, "postgresql": 0.8, "bench": 0.5}
    assert compare.markdown({}) == []
    assert any("peer, paced" in line for line in compare.markdown(e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0)))


def test_the_run_table_reports_each_processes_peak_rss_over_every_phase() -> None:
    windows = {"burst": {"peak_rss_mb": {"publication": 120.0, "delivery": 90.0}},
               "peer burst": {"peak_rss_mb": {"peer-sse": 70.0}},
               "overload": {"peak_rss_mb": {"publication": 300.0}, "cpu_util": {"publication-2": 0.1}}}
    assert report.peak_rss_mb({"windows": windows}) == {"publication": 300.0, "delivery": 90.0, "peer-sse": 70.0}
    assert report.processes(windows) == ["publication", "delivery", "peer-sse", "publication-2"]


def test_a_server_is_found_by_the_port_it_listens_on_and_its_cpu_read_from_proc() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert listener_pid(server.getsockname()[1]) == os.getpid()
    own = cpu_seconds(os.getpid())
    assert own is not None and tree_cpu_seconds(os.getpid()) is not None
    assert tree_cpu_seconds(os.getpid()) >= own  # type: ignore[operator]


def test_the_peer_carries_a_proposals_blocks_with_their_ordinals_in_the_run() -> None:
    body = typical_part("run-1", "call-7").model_dump(mode="json")
    candidate, proposed = proposal(body)
    assert candidate == "tool:call-7" and len(proposed) == 2
    run = Run("run-1", "acct")
    run.accept("tool:call-6", [{"markdown": "earlier"}])
    blocks = blocks_of(run, candidate, proposed)
    assert [b["ordinal"] for b in blocks] == [1, 2]
    assert all(b["markdown"].startswith("(mk:call-7)") for b in blocks)
    assert proposal({"type": "answer.text", "turn_id": "t1", "segment": 0, "text": "plain"}) == (
        "text:t1:0", [{"markdown": "plain"}])


def test_the_servers_load_without_either_stack_comes_off_a_figure_never_below_the_stacks_own_processes() -> None:
    row = {"proposals": 100, "stack_cpu_ms_per_proposal": 50.0,
           "window": {"seconds": 10.0, "cpu_s": {"peer-publication": 1.0}}}
    assert compare.net_of_servers_load(row, {"kafka": 0.1, "postgresql": 0.1}) == 30.0  # 2 core-s of 5
    assert compare.net_of_servers_load(row, {"kafka": 1.0}) == 10.0  # the processes' own 1 core-s stays
    assert compare.net_of_servers_load(row, None) is None


def test_a_paced_rate_the_peer_did_not_keep_up_with_is_said_beside_the_table() -> None:
    results = e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0)
    results["peer"]["paced"].update(complete=False, sse_unfinished_at_deadline=3, proposals=1260)
    assert any("did not keep up at 42.0/s" in line for line in compare.markdown(results))
    results["peer"]["paced"]["complete"] = True
    assert not any("did not keep up" in line for line in compare.markdown(results))


def test_paced_against_burst_is_the_stacks_cpu_at_each_latency_load_over_its_burst_cpu() -> None:
    rows = {row["key"]: row for row in report.targets({"e2e": e2e(2.0, 6.5, 4.0, 9.7, 60.0, 17.0)})}
    assert rows["stack_paced_30_vs_burst_cpu"]["value"] == round(1.0 / 2.0, 3)
    assert rows["stack_paced_30_vs_burst_cpu"]["status"] == "PASS"  # 0.5 ≤ 1.5
    assert rows["stack_paced_5_vs_burst_cpu"]["value"] == round(4.0 / 2.0, 3)
    assert rows["stack_paced_5_vs_burst_cpu"]["status"] == "PASS"  # 2.0 ≤ 2 (the bound is inclusive)
    missed = {row["key"]: row["status"] for row in report.targets({"e2e": e2e(2.0, 6.5, 14.9, 9.7, 60.0, 17.0)})}
    assert missed["stack_paced_5_vs_burst_cpu"] == "MISS"  # 7.45 > 2
    unmeasured = {row["key"]: row["status"] for row in report.targets({"e2e": {}})}
    assert unmeasured["stack_paced_30_vs_burst_cpu"] == unmeasured["stack_paced_5_vs_burst_cpu"] == "n/a"

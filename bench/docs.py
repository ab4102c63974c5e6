"""``make docs``: the figures of ``README.md`` and ``docs/scaling.md``, written from
``bench/results/latest.json`` by the renderers of :mod:`bench.report` (the ones that write
``latest.md``), and the settings each hop runs with, read from the constants in the code
(``SETTINGS``), so no figure and no setting in a doc is typed by hand.

A doc marks each generated region::

    <!-- bench:NAME -->
    …written by make docs…
    <!-- /bench:NAME -->

and ``python -m bench.docs`` rewrites every region from the results; ``--check`` changes
nothing and exits 1 naming each region that differs (``tests/unit/test_docs.py`` runs it),
so a hand edit inside a region, or results newer than the docs, fails the tests."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "latest.json"
DOCS = (ROOT / "README.md", ROOT / "docs" / "scaling.md")
REGION = re.compile(r"(<!-- bench:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.DOTALL)

SETTINGS = (
    ("services/common/subscription.py", "POLL_WAIT_MS", "ms a tracked consumer's poll waits for records (it returns with the "
     "first fetch that brought any)"),
    ("services/common/subscription.py", "LONG_POLL_MS", "ms the broker may hold a fetch that carries every partition "
     "(a quiet consumer's long poll)"),
    ("services/common/subscription.py", "GATHER_FROM", "records of a poll after which a gathering consumer's next fetch "
     "gathers (the default)"),
    ("services/common/subscription.py", "max_records", "records one poll takes at most (every consumer)"),
    ("services/common/subscription.py", "FETCH_WAIT_MS", "ms the broker may hold any other fetch (the latency path)"),
    ("services/journal/consumer.py", "GATHER_MS", "ms the Journal's fetches gather records"),
    ("services/delivery/consumer.py", "GATHER_MS", "ms Delivery's fetches gather records once it is busy"),
    ("services/delivery/consumer.py", "GATHER_FROM", "records of a poll after which Delivery's next fetch gathers"),
    ("services/common/settings.py", "offset_commit_seconds", "s between Kafka offset commits "
     "(`IMPRINT_OFFSET_COMMIT_SECONDS`)"),
    ("services/common/settings.py", "inline_poll_records", "records of the largest poll whose transaction "
     "runs on the event loop (`IMPRINT_INLINE_POLL_RECORDS`; every consumer)"),
    ("services/common/relay.py", "RECORD_SECONDS", "s between a relay's position records"),
    ("services/common/relay.py", "UNRECORDED_SPAN", "positions a relay may pass without recording when it "
     "announces nothing"),
    ("services/common/settings.py", "hot_state_bytes", "bytes each part's hot state may weigh, per process "
     "(`IMPRINT_HOT_STATE_BYTES`: hot aggregates, Delivery's hot runs)"),
    ("services/common/hot_cache.py", "IN_MEMORY_OVERHEAD", "bytes in memory a hot aggregate is weighed at per "
     "stored byte of its snapshot and events"),
    ("services/common/hot_cache.py", "AGGREGATE_CACHE_MAXSIZE", "hot aggregates per instance, by count (a backstop)"),
    ("services/journal/application.py", "kept_after_done", "s a closed execution stays hot"),
    ("services/publication/application.py", "snapshotting_intervals", "events between snapshots, per aggregate"),
    ("services/delivery/hot_runs.py", "RUN_OVERHEAD", "bytes a hot run of Delivery weighs beyond its rows' text"),
    ("services/delivery/hot_runs.py", "IDLE_SECONDS", "s a hot run of Delivery no poll touched stays kept"),
    ("services/recovery/log_reader.py", "RUNS_PER_READ", "runs `imprint replay` reads and hands a worker at once"),
    ("services/common/lifecycle.py", "GC_THRESHOLD", "the cyclic collector's thresholds once a part runs"),
)
"""(module, name, what it bounds): the settings ``docs/scaling.md`` explains, each read
from its definition — a module or class assignment, a dict entry, or a function
parameter's default."""


def setting(path: str, name: str) -> str:
    """The value ``name`` is given in ``path``, as written (numbers with thousands separators)."""
    tree = ast.parse((ROOT / path).read_text())
    for node in ast.walk(tree):
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            value = node.value
            if isinstance(value, ast.Call):  # a pydantic Field(default=…)
                value = next((k.value for k in value.keywords if k.arg == "default"), value)
        elif isinstance(node, ast.Dict):
            value = next((v for k, v in zip(node.keys, node.values, strict=True)
                          if isinstance(k, ast.Constant) and k.value == name), None)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
            defaults += node.args.kw_defaults
            value = next((d for a, d in zip(arguments, defaults, strict=True) if a.arg == name and d), None)
        if value is not None:
            try:
                literal = ast.literal_eval(value)
            except ValueError:
                return ast.unparse(value)
            if isinstance(literal, str) and literal.isdigit():
                literal = int(literal)
            numeric = isinstance(literal, int | float) and not isinstance(literal, bool)
            return f"{literal:,}" if numeric else str(literal)
    raise LookupError(f"{path} defines no {name} (a setting docs/scaling.md explains: update bench/docs.py SETTINGS)")


def settings_table(_results: dict[str, Any]) -> list[str]:
    out = ["| setting | value | where | what it bounds |", "|---|---|---|---|"]
    out += [f"| `{name}` | {setting(path, name)} | `{path}` | {what} |" for path, name, what in SETTINGS]
    return out


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "run": lambda results: [report.run_summary(results)],
    "targets": lambda results: report.targets_table(results.get("targets") or report.targets(results), keys=False),
    "figures": report.scaling_figures,
    "settings": settings_table,
}
"""Each region's name → what it holds, from the results."""


def rendered(text: str, results: dict[str, Any]) -> str:
    """``text`` with every region it marks written from ``results``."""

    def region(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in RENDERERS:
            raise KeyError(f"no renderer for the region bench:{name} (known: {', '.join(RENDERERS)})")
        return match.group(1) + "\n".join(RENDERERS[name](results)) + "\n" + match.group(4)

    return REGION.sub(region, text)


def stale_regions(results: dict[str, Any] | None = None, docs: tuple[Path, ...] = DOCS) -> list[str]:
    """``doc: bench:NAME`` for each region that is not what the results give."""
    results = results if results is not None else json.loads(RESULTS.read_text())
    stale = []
    for doc in docs:
        text = doc.read_text()
        fresh = {m.group("name"): m.group("body") for m in REGION.finditer(rendered(text, results))}
        stale += [f"{doc.relative_to(ROOT)}: bench:{m.group('name')}" for m in REGION.finditer(text)
                  if fresh.get(m.group("name")) != m.group("body")]
    return stale


def regions_of(doc: Path) -> list[str]:
    return [m.group("name") for m in REGION.finditer(doc.read_text())]


def write(results: dict[str, Any] | None = None, docs: tuple[Path, ...] = DOCS) -> list[Path]:
    """Rewrite every region of ``docs``; the docs that changed."""
    results = results if results is not None else json.loads(RESULTS.read_text())
    changed = []
    for doc in docs:
        text = doc.read_text()
        new = rendered(text, results)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_regions()
        for region in stale:
            print(f"{region} differs from bench/results/latest.json: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    for doc in write():
        print(f"wrote {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

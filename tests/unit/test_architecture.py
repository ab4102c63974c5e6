"""The layout's promises, checked on the source: the rules in ``libs/`` are pure (no
services, no I/O library); the parts of ``services/`` import each other in one direction only
(:data:`PARTS_MAY_USE`: no cycle, hidden or not) and hand on no other part's names;
``services/cli.py``, ``stack.py`` and ``demo.py`` are the composition roots."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / "libs" / "imprint"
SERVICES = ROOT / "services"

IO_LIBRARIES = frozenset({
    "services", "aiokafka", "kafka", "faststream", "psycopg", "psycopg_pool", "sqlite3", "fastapi", "starlette",
    "uvicorn", "httpx", "requests", "socket", "subprocess", "pydantic_settings", "structlog",
    "pydantic_ai", "opentelemetry",
})
ADAPTERS = {
    "runtime/kafka.py": {"aiokafka", "opentelemetry"},
    "runtime/pydantic_ai.py": {"pydantic_ai"},
    "runtime/tracecontext.py": {"opentelemetry"},
}
"""The runtime SDK is a client library: its transport adapter and its agent-framework tool
are the only modules under ``libs/`` that may import an I/O library (see their docstrings).
OpenTelemetry counts as one (its SDK exports over the network): the transport and the trace
context helpers it shares with the services may use its API, nothing else in ``libs/`` may."""

OPENTELEMETRY_API = ("opentelemetry.trace", "opentelemetry.context", "opentelemetry.propagate")
"""What of OpenTelemetry ``libs/`` may import: the API. The SDK and its exporters are the
application's choice (``services.common.tracing`` for imprint's parts)."""

ROOTS = {"cli.py", "stack.py", "demo.py", "__init__.py"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.rule("P15")
def test_no_module_in_libs_imports_services_or_an_io_library() -> None:
    offenders = {}
    for path in sorted(LIBS.rglob("*.py")):
        relative = path.relative_to(LIBS).as_posix()
        allowed = ADAPTERS.get(relative, set())
        bad = (imported_roots(path) & IO_LIBRARIES) - allowed
        if bad:
            offenders[relative] = sorted(bad)
    assert offenders == {}, f"libs/ must stay pure: {offenders}"


@pytest.mark.rule("P15")
def test_libs_use_only_the_opentelemetry_api() -> None:
    offenders = {}
    for path in sorted(LIBS.rglob("*.py")):
        bad = sorted(module for module in imported_modules(path)
                     if module.split(".")[0] == "opentelemetry" and module != "opentelemetry"
                     and not module.startswith(OPENTELEMETRY_API))
        if bad:
            offenders[path.relative_to(LIBS).as_posix()] = bad
    assert offenders == {}, f"libs/ may use the OpenTelemetry API only: {offenders}"


PARTS_MAY_USE = {
    "common": set(),
    "tools": {"common"},
    "publication": {"common"},
    "journal": {"common"},
    "recovery": {"common", "publication", "journal"},
    "delivery": {"common", "publication", "recovery"},
}
"""Which other parts each part's modules may import: the operator tools read the logs of
Publication and the Journal; Delivery's operator page shows a run's timeline from them. One
direction only, so no cycle; Delivery's own store reaches the operator tools as an argument
(``inspect(open_store=…)``), never as an import."""


def part_imports() -> dict[str, dict[str, set[str]]]:
    """Per part: each module (relative path) → the other parts it imports, wherever in the
    module the import is (a function-local import counts: it would only hide a cycle)."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in sorted(SERVICES.rglob("*.py")):
        relative = path.relative_to(SERVICES)
        if len(relative.parts) == 1:
            continue  # services/cli.py, stack.py, demo.py: the composition roots
        own = relative.parts[0]
        others = {module.split(".")[1] for module in imported_modules(path)
                  if module.startswith("services.") and module.split(".")[1] != own}
        found.setdefault(own, {})[relative.as_posix()] = others
    return found


@pytest.mark.rule("P15")
def test_a_part_imports_only_the_parts_below_it() -> None:
    imports = part_imports()
    assert set(imports) == set(PARTS_MAY_USE), "every part is placed in the layering"
    offenders = {module: sorted(others - PARTS_MAY_USE[part])
                 for part, modules in imports.items() for module, others in modules.items()
                 if others - PARTS_MAY_USE[part]}
    assert offenders == {}, f"a part imports a part above it (a cycle in the making): {offenders}"


@pytest.mark.rule("P15")
def test_the_parts_import_each_other_without_a_cycle() -> None:
    graph = {part: set().union(*modules.values()) for part, modules in part_imports().items()}
    placed: list[str] = []
    while len(placed) < len(graph):
        ready = sorted(part for part, uses in graph.items() if part not in placed and uses <= set(placed))
        assert ready, f"a cycle among {sorted(set(graph) - set(placed))}: {graph}"
        placed.extend(ready)


@pytest.mark.rule("P15")
def test_no_part_reexports_another_parts_names() -> None:
    """A part's module defines or uses what it imports; it does not hand another part's names on
    (``__all__`` facades made "reach a part only through its service" a formality)."""
    offenders = []
    for path in sorted(SERVICES.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                offenders.append(path.relative_to(SERVICES).as_posix())
    assert offenders == [], f"re-export lists in services/: {offenders}"


UNIT = ROOT / "tests" / "unit"
TEST_SUPPORT_ALLOWED = {"tests.support.delivery_builders", "tests.support.runs", "tests.support.versions"}
"""Shared builders of contract messages, and the finder of what libs/imprint stores: pure,
so the unit tier may use them."""


@pytest.mark.rule("P15")
def test_the_unit_tier_does_no_io() -> None:
    """``tests/unit`` proves the pure rules: it imports no service, no I/O library and no
    test support but pure builders, and asks for no temporary folder. What runs services
    code in one process is ``tests/component``; what needs the broker or the database,
    ``tests/integration`` and the tiers after it."""
    offenders: dict[str, list[str]] = {}
    for path in sorted(UNIT.rglob("*.py")):
        if path.name == "test_architecture.py":
            continue  # this checker reads the source tree it checks
        modules = imported_modules(path)
        bad = sorted({m.split(".")[0] for m in modules} & (IO_LIBRARIES | {"sqlite3"}))
        bad += sorted(m for m in modules if m.startswith("tests.") and m not in TEST_SUPPORT_ALLOWED)
        if "tmp_path" in path.read_text():
            bad.append("tmp_path")
        if bad:
            offenders[path.relative_to(UNIT).as_posix()] = bad
    assert offenders == {}, f"the unit tier must stay pure: {offenders}"

"""The layout's two promises, checked on the source: the rules in ``libs/`` are pure
(no services, no I/O library), and no service reaches into another service's
internals: only ``services.common`` is shared, and another part is reached only
through its public face, ``services.<part>.service`` (how its store is opened);
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


@pytest.mark.rule("P15")
def test_no_service_imports_another_services_internals() -> None:
    offenders = {}
    for path in sorted(SERVICES.rglob("*.py")):
        relative = path.relative_to(SERVICES)
        if len(relative.parts) == 1:
            continue  # services/cli.py, stack.py, demo.py: the composition roots
        own = relative.parts[0]
        if own in {"common", "tools"}:
            owner_may = {"common"}
        else:
            owner_may = {"common", own}
        bad = sorted(
            module for module in imported_modules(path)
            if module.startswith("services.") and module.split(".")[1] not in owner_may
            and not (len(module.split(".")) == 3 and module.split(".")[2] == "service")
        )
        if bad:
            offenders[relative.as_posix()] = bad
    assert offenders == {}, f"a service reaches into another's internals: {offenders}"

"""The layout's promises, checked on the source: the rules in ``libs/`` are pure (no
services, no I/O library); the parts of ``services/`` import each other in one direction only
(:data:`PARTS_MAY_USE`: no cycle, hidden or not) and hand on no other part's names;
``services/cli.py``, ``stack.py`` and ``demo.py`` are the composition roots."""

from __future__ import annotations

import ast
import importlib.util
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
    "conformance": {"common", "delivery"},
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


EVENTSOURCING_ADAPTER = SERVICES / "common" / "eventsourcing_adapter.py"
"""The one module that may touch a private member of eventsourcing (its docstring says
which, and why no public extension point serves)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _library_classes() -> dict[str, tuple[set[str], set[str]]]:
    """Every class of the installed eventsourcing, read from its source (nothing imported):
    its name → (its bases' names, the private members it defines or assigns on ``self``)."""
    spec = importlib.util.find_spec("eventsourcing")
    assert spec is not None and spec.submodule_search_locations, "eventsourcing is installed"
    classes: dict[str, tuple[set[str], set[str]]] = {}
    for path in Path(spec.submodule_search_locations[0]).rglob("*.py"):
        if "tests" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {_base_name(base) for base in node.bases} - {""}
            members = {item.name for item in node.body
                       if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name)}
            members |= {attribute.attr for attribute in ast.walk(node) if isinstance(attribute, ast.Attribute)
                        and isinstance(attribute.value, ast.Name) and attribute.value.id == "self"
                        and _private(attribute.attr)}
            known = classes.setdefault(node.name, (set(), set()))
            known[0].update(bases)
            known[1].update(members)
    return classes


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


def private_library_uses(sources: dict[str, str], library: dict[str, tuple[set[str], set[str]]]) -> list[str]:
    """Each place in ``sources`` (module name → source) that imports, overrides, calls or
    reads a private member of the library: an import of a private name of its modules; a
    ``def _x`` in a class derived from a library class that defines ``_x``; ``super()._x``,
    or ``self._x`` the project's own classes do not define, where a library class above
    defines ``_x``; ``something._x`` on any other object where any library class defines
    ``_x``."""
    everywhere = set().union(*(members for _, members in library.values()))
    trees = {module: ast.parse(source) for module, source in sources.items()}
    project: dict[str, tuple[ast.ClassDef, list[str]]] = {}
    for module, tree in trees.items():
        names = _imported_names(tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                project[f"{module}.{node.name}"] = (node, [names.get(_base_name(b), f"{module}.{_base_name(b)}")
                                                           for b in node.bases])

    def library_members(name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
        """The private members of the library classes above ``name`` (``None``: none above it)."""
        if name in seen or name not in library:
            return None
        bases, members = library[name]
        found = set(members)
        for base in bases:
            found |= library_members(base, seen | {name}) or set()
        return found

    def above(qualified: str, seen: frozenset[str] = frozenset()) -> tuple[set[str] | None, set[str]]:
        """(private members of the library classes above, members the project's own classes define)."""
        node, bases = project[qualified]
        own = {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
        own |= {a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)
                and isinstance(a.value, ast.Name) and a.value.id == "self"}
        own |= {t.id for item in node.body if isinstance(item, (ast.Assign, ast.AnnAssign))
                for t in (item.targets if isinstance(item, ast.Assign) else [item.target]) if isinstance(t, ast.Name)}
        found: set[str] | None = None
        for base in bases:
            if base.startswith("eventsourcing."):
                members = library_members(base.rsplit(".", 1)[1])
            elif base in project and base not in seen:
                members, theirs = above(base, seen | {qualified})
                own |= theirs
            else:
                continue
            if members is not None:
                found = (found or set()) | members
        return found, own

    uses: list[str] = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "eventsourcing":
                uses.extend(f"{module}:{node.lineno} imports {node.module}.{alias.name}"
                            for alias in node.names if _private(alias.name))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            members, own = above(f"{module}.{node.name}")
            defined_here = {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
            for name in sorted(defined_here & (members or set())):
                if _private(name):
                    uses.append(f"{module}.{node.name} overrides {name}")
            for attribute in ast.walk(node):
                if not isinstance(attribute, ast.Attribute) or not _private(attribute.attr):
                    continue
                target = attribute.value
                if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "super":
                    if attribute.attr in (members or set()):
                        uses.append(f"{module}.{node.name} calls super().{attribute.attr}")
                elif isinstance(target, ast.Name) and target.id in ("self", "cls"):
                    if attribute.attr not in own and attribute.attr in (everywhere if members is None else members):
                        uses.append(f"{module}.{node.name} uses the library's self.{attribute.attr}")
        for attribute in ast.walk(tree):
            if (isinstance(attribute, ast.Attribute) and attribute.attr in everywhere
                    and not (isinstance(attribute.value, ast.Name) and attribute.value.id in ("self", "cls"))
                    and not (isinstance(attribute.value, ast.Call) and isinstance(attribute.value.func, ast.Name)
                             and attribute.value.func.id == "super")):
                uses.append(f"{module}:{attribute.lineno} reads {ast.unparse(attribute)}")
    return uses


def _imported_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    return names


def product_sources() -> dict[str, str]:
    sources = {}
    for path in sorted(LIBS.rglob("*.py")) + sorted(SERVICES.rglob("*.py")):
        if path != EVENTSOURCING_ADAPTER:
            sources[path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")] = path.read_text()
    return sources


@pytest.mark.rule("P15")
def test_no_private_eventsourcing_member_outside_the_adapter() -> None:
    """An upgrade of eventsourcing may change any private member without notice: the log
    uses the library's public extension points, and the hooks inside one insert
    transaction that no public point offers are confined to one adapter module, whose
    contract test pins them (``tests/component/common/test_eventsourcing_adapter.py``)."""
    uses = private_library_uses(product_sources(), _library_classes())
    assert uses == [], f"private eventsourcing members outside {EVENTSOURCING_ADAPTER.name}: {uses}"


@pytest.mark.rule("P15")
def test_the_private_member_check_finds_each_kind_of_use() -> None:
    """The check above is not vacuous: each way of touching a private member is found,
    the adapter's own uses among them."""
    library = _library_classes()
    adapter = EVENTSOURCING_ADAPTER.read_text()
    assert private_library_uses({"services.common.eventsourcing_adapter": adapter}, library), \
        "the adapter's hooks are found"
    sample = '''
from eventsourcing.application import Application
from eventsourcing.utils import _topic_cache
from eventsourcing.sqlite import SQLiteProcessRecorder
from eventsourcing.persistence import JSONTranscoder

class Log(Application):
    def _take_snapshots(self, processing_event):
        return super()._record(processing_event)

class Recorder(SQLiteProcessRecorder):
    def insert(self, c, events):
        return self._insert_events(c, events)

class Transcoder(JSONTranscoder):
    def decode(self, data):
        return self._decode_obj(data)

class Tracked:
    def positions(self, c, name):
        return self._max_tracking_id(name, c)

def save(app, processing):
    app._notify(app._record(processing))
'''
    assert sorted(private_library_uses({"sample": sample}, library)) == sorted([
        "sample.Log overrides _take_snapshots",
        "sample.Log calls super()._record",
        "sample.Recorder uses the library's self._insert_events",
        "sample.Transcoder uses the library's self._decode_obj",
        "sample.Tracked uses the library's self._max_tracking_id",
        "sample:3 imports eventsourcing.utils._topic_cache",
        "sample:24 reads app._notify",
        "sample:24 reads app._record",
    ])

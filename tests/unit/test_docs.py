"""The docs say what the tree holds, so they cannot drift from it unnoticed.

* every rule id a test marks, the README, a page of ``docs/`` or a docstring of ``libs/`` or
  ``services/`` names is defined in ``docs/rules.md``, and every rule defined there is proved
  by a test (``@pytest.mark.rule``);
* a doc that cites rule ids or uses *entry A*, *entry B* or *the Host* points to their
  definitions;
* the code layout of ``docs/architecture.md`` names every module of ``libs/`` and ``services/``;
* a package's map of its modules (its ``__init__`` docstring) names modules that exist;
* the generated regions of the README and ``docs/scaling.md`` are what ``bench/docs.py``
  writes from ``bench/results/latest.json`` (``make docs``), never a hand edit.

These read the source tree and import nothing of it."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "rules.md"
RULE_ID = re.compile(r"\b([PRXD])([0-9]{1,2})\b")
"""A rule id as the docs and docstrings write it: P11, R8, X10, D7."""


def defined_rules() -> dict[str, str]:
    """Each rule id ``docs/rules.md`` defines (a ``### P11 …`` heading under its own anchor)
    → its anchor."""
    lines = RULES.read_text().splitlines()
    defined: dict[str, str] = {}
    for index, line in enumerate(lines):
        heading = re.match(r"### ([PRXD][0-9]{1,2}) \S", line)
        if heading:
            rule = heading.group(1)
            anchor = f'<a id="{rule.lower()}"></a>'
            assert index > 0 and lines[index - 1].strip() == anchor, (
                f"docs/rules.md: {rule} has no anchor {anchor} on the line before its heading")
            assert rule not in defined, f"docs/rules.md defines {rule} twice"
            defined[rule] = rule.lower()
    return defined


def anchors_of(path: Path) -> set[str]:
    return set(re.findall(r'<a id="([a-z0-9-]+)"></a>', path.read_text()))


def python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(p for p in (ROOT / folder).rglob("*.py") if "node_modules" not in p.parts)


@functools.cache
def _marked_rules() -> dict[str, frozenset[str]]:
    """Rule id → the test files that mark it: ``@pytest.mark.rule(id)`` as written, and the
    ids of a ``…_RULES`` tuple a helper applies as marks (``tests/fault/invariants.py``)."""
    marked: dict[str, set[str]] = {}
    for path in python_files("tests"):
        text = path.read_text()
        found = set(re.findall(r"mark\.rule\(\s*[\"']([^\"']+)[\"']", text))
        for rules in re.findall(r"^\w+_RULES\s*=\s*\(([^)]*)\)", text, re.MULTILINE):
            found |= set(re.findall(r"[\"']([^\"']+)[\"']", rules))
        for rule in found:
            marked.setdefault(rule, set()).add(path.relative_to(ROOT).as_posix())
    return {rule: frozenset(where) for rule, where in marked.items()}


def marked_rules() -> dict[str, set[str]]:
    return {rule: set(where) for rule, where in _marked_rules().items()}


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@functools.cache
def docstrings(path: Path) -> tuple[str, ...]:
    """Every docstring of a module: its own, its classes' and its functions'."""
    return tuple(text for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                 and (text := ast.get_docstring(node, clean=False)))


def cited_rules() -> dict[str, set[str]]:
    """Rule id → the docs and product modules (docstrings) that cite it."""
    cited: dict[str, set[str]] = {}
    for path in docs():
        for letter, number in RULE_ID.findall(path.read_text()):
            cited.setdefault(letter + number, set()).add(path.relative_to(ROOT).as_posix())
    for path in python_files("libs", "services"):
        for text in docstrings(path):
            for letter, number in RULE_ID.findall(text):
                cited.setdefault(letter + number, set()).add(path.relative_to(ROOT).as_posix())
    return cited


def test_every_rule_used_is_defined_in_docs_rules() -> None:
    defined = defined_rules()
    used = cited_rules()
    for rule, where in marked_rules().items():
        used[rule] = used.get(rule, set()) | where
    undefined = {rule: sorted(where) for rule, where in sorted(used.items()) if rule not in defined}
    assert undefined == {}, f"rule ids used but not defined in docs/rules.md (id → where): {undefined}"


def test_every_section_cited_is_a_section_of_docs_rules() -> None:
    """"§2" in a doc or a docstring (also as "SPEC §2") is the section of ``docs/rules.md``
    numbered the same."""
    sections = {a[1:] for a in anchors_of(RULES) if re.fullmatch(r"s[0-9]+", a)}
    cited: dict[str, set[str]] = {}
    texts = [(p, p.read_text()) for p in docs()]
    texts += [(p, text) for p in python_files("libs", "services") for text in docstrings(p)]
    for path, text in texts:
        for number in re.findall(r"§\s*([0-9]+)", text):
            if number not in sections:
                cited.setdefault(f"§{number}", set()).add(path.relative_to(ROOT).as_posix())
    assert cited == {}, f"sections cited that docs/rules.md does not have: {cited}"


def test_every_rule_defined_is_proved_by_a_test() -> None:
    marked = marked_rules()
    untested = sorted((rule for rule in defined_rules() if rule not in marked), key=lambda r: (r[0], int(r[1:])))
    assert untested == [], f"rules defined in docs/rules.md that no test marks with @pytest.mark.rule: {untested}"


def test_the_rules_are_all_there() -> None:
    """The four families, numbered without a gap."""
    defined = defined_rules()
    for letter in "PRXD":
        numbers = sorted(int(rule[1:]) for rule in defined if rule[0] == letter)
        assert numbers and numbers == list(range(1, numbers[-1] + 1)), f"{letter} rules: {numbers}"


def test_docs_link_to_the_rules_and_terms_they_use() -> None:
    """A doc citing rule ids links to ``docs/rules.md``; one that speaks of entry A, entry B or
    the Host links to that term's definition; every link into ``rules.md`` lands on an anchor."""
    anchors = anchors_of(RULES)
    terms = {r"\bentry A\b": "entry-a", r"\bentry B\b": "entry-b", r"\bthe Host\b": "the-host"}
    problems: list[str] = []
    for path in docs():
        if path == RULES:
            continue
        text, name = path.read_text(), path.relative_to(ROOT).as_posix()
        links = re.findall(r"\]\((?:docs/)?rules\.md(?:#([^)]*))?\)", text)
        if RULE_ID.search(text) and not links:
            problems.append(f"{name} cites rule ids but never links to docs/rules.md")
        for pattern, anchor in terms.items():
            if re.search(pattern, text) and anchor not in links:
                problems.append(f"{name} uses {pattern[2:-2]!r} without linking rules.md#{anchor}")
        problems += [f"{name} links rules.md#{a}, which rules.md does not define" for a in links
                     if a and a not in anchors]
    assert problems == [], "\n".join(problems)


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layout_modules() -> set[str]:
    """The modules the code layout of ``docs/architecture.md`` names: its fenced block under
    ``## Code layout``, where a line's leading names (``folder/`` or ``module.py``, single
    spaces between them) sit under the folder of the nearest less indented ``folder/`` line,
    and a folder's line stands for its ``__init__.py``."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Code layout"):]
    block = section[section.index("```\n") + 4:]
    block = block[:block.index("```")]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        names = re.split(r" {2,}", line.strip())[0].split(" ")
        if not all(n.endswith((".py", "/")) for n in names):
            continue  # a description carried over to the next line
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        for name in names:
            path = parent + name
            if name.endswith("/"):
                named.add(path + "__init__.py")
                folders.append((indent, path))
            else:
                named.add(path)
    return named


def test_the_code_layout_names_every_module() -> None:
    tree = {p.relative_to(ROOT).as_posix() for p in python_files("libs", "services")}
    named = {n for n in layout_modules() if n.startswith(("libs/", "services/"))}
    missing = sorted(tree - named)
    extra = sorted(n for n in named - tree if not (n.endswith("/__init__.py") and (ROOT / n).parent.is_dir()))
    assert (missing, extra) == ([], []), (
        f"docs/architecture.md's code layout: modules missing from it (add a line each): {missing}; "
        f"named there but not in the tree (remove or rename): {extra}")


def module_map(init: Path) -> set[str]:
    """The modules a package's ``__init__`` docstring maps: the first column of its table
    (``name`` between double backquotes) and every ``:mod:`` reference."""
    text = ast.get_docstring(ast.parse(init.read_text())) or ""
    names = set(re.findall(r"^``([A-Za-z_][A-Za-z0-9_]*)``\s{2,}", text, re.MULTILINE))
    names |= set(re.findall(r":mod:`([.\w]+)`", text))
    return names


TOP_PACKAGES = {"imprint": ROOT / "libs" / "imprint", "services": ROOT / "services"}


def resolves(package: Path, name: str) -> bool:
    """Whether ``name`` (``.module`` relative to ``package``, or ``imprint.…``/``services.…``)
    is a module or package of the tree."""
    if name.startswith("."):
        base, parts = package, name[1:].split(".")
    elif name.split(".")[0] in TOP_PACKAGES:
        base, parts = TOP_PACKAGES[name.split(".")[0]], name.split(".")[1:]
    else:
        return False
    target = base.joinpath(*parts) if parts else base
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def test_every_package_map_names_modules_that_exist() -> None:
    stale: dict[str, list[str]] = {}
    for init in python_files("libs", "services"):
        if init.name != "__init__.py":
            continue
        names = {name if "." in name else "." + name for name in module_map(init)}
        bad = sorted(name for name in names if not resolves(init.parent, name))
        if bad:
            stale[init.relative_to(ROOT).as_posix()] = bad
    assert stale == {}, f"package maps naming modules that do not exist (package → names): {stale}"


def test_the_generated_figures_are_what_the_results_give() -> None:
    """``make docs`` wrote every ``<!-- bench:… -->`` region of the README and
    ``docs/scaling.md`` from ``bench/results/latest.json`` and the code's settings, and
    nobody edited one by hand since (``python -m bench.docs --check``)."""
    from bench import docs as generator

    regions = {doc.name: generator.regions_of(doc) for doc in generator.DOCS}
    assert regions == {"README.md": ["run", "targets"], "scaling.md": ["settings", "run", "figures"]}, regions
    assert generator.stale_regions() == [], "run `make docs`: these regions differ from what it writes"


def test_a_hand_edit_of_a_figure_is_caught() -> None:
    """The check compares each region with what the results give, so one changed figure
    is named."""
    import json

    from bench import docs as generator

    results = json.loads(generator.RESULTS.read_text())
    results["e2e"]["saturation"]["per_s"] = (results["e2e"]["saturation"]["per_s"] or 0) + 1
    stale = generator.stale_regions(results)
    assert "README.md: bench:run" in stale and "docs/scaling.md: bench:figures" in stale, stale


def test_every_phony_make_target_has_a_rule() -> None:
    makefile = (ROOT / "Makefile").read_text()
    phony = {name for line in re.findall(r"^\.PHONY:(.*)$", makefile, re.MULTILINE) for name in line.split()}
    defined = set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", makefile, re.MULTILINE))
    assert sorted(phony - defined) == [], f"phony make targets without a rule: {sorted(phony - defined)}"

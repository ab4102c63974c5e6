"""R8, the log outlives the code: every stored event type carries a version, checked on the
classes themselves (:mod:`tests.support.versions` finds them), so a new event cannot forget
its version and a bumped one cannot forget its upcaster.

The version is eventsourcing's own: ``class_version`` on the event class (and on the
aggregate, for its snapshot state), and a static ``upcast_v<n>_v<n+1>(state)`` per step,
which the library's mapper (events) and ``Snapshot.mutate`` (snapshots) run on what an
older release stored, and only on that."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from eventsourcing.utils import resolve_topic

from tests.support.versions import (
    aggregates,
    declared_version,
    name_of,
    stored_event_classes,
    stored_events,
    unnested_event_classes,
    upcast_steps,
)

pytestmark = pytest.mark.rule("R8")

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_LOGS = ROOT / "tests" / "golden" / "logs"
STORED_BASE = re.compile(r"\bAggregate\b|\bEvent\b|\bCreated\b|DomainEvent|CanMutateAggregate|Snapshot")


def test_the_stores_have_aggregates_and_events_to_check() -> None:
    names = {name_of(a) for a in aggregates()}
    assert {"imprint.publication.run:PublicationRun", "imprint.publication.sources:SourceDependents",
            "imprint.journal.execution:AnswerExecution"} <= names
    assert len(stored_event_classes()) >= 40


def test_every_stored_event_class_declares_its_version() -> None:
    missing = [name_of(e) for e in stored_event_classes() if declared_version(e) is None]
    assert missing == [], ("declare `class_version = 1` on each (and write out a creation event the "
                           f"library would otherwise make for you): {missing}")


def test_every_aggregate_declares_the_version_of_its_snapshot_state() -> None:
    missing = [name_of(a) for a in aggregates() if declared_version(a) is None]
    assert missing == [], f"declare `class_version = 1` on each: {missing}"


def test_every_version_step_has_its_upcaster() -> None:
    classes = [*aggregates(), *stored_event_classes()]
    assert all(version >= 1 for c in classes if (version := declared_version(c)) is not None)
    missing = [f"{name_of(c)}.upcast_v{n}_v{n + 1}" for c in classes for c, n in upcast_steps(c)
               if not callable(getattr(c, f"upcast_v{n}_v{n + 1}", None))]
    assert missing == []
    beyond = [f"{name_of(c)}.{name}" for c in classes for name in dir(c) if name.startswith("upcast_v")
              and int(name.split("_v")[-1]) > (declared_version(c) or 1)]
    assert beyond == [], "an upcaster past the declared version never runs: bump class_version"


def test_an_event_class_outside_an_aggregate_is_only_a_base() -> None:
    """Events are stored through their aggregate (``trigger_event(self.X)``): one written at
    module level would escape the checks above, so it must be a base of nested ones."""
    nested = set(stored_event_classes())
    leaves = [name_of(c) for c in unnested_event_classes() if not any(sub in nested for sub in _subclasses(c))]
    assert leaves == [], f"nest these in their aggregate: {leaves}"


def test_services_define_nothing_that_is_stored() -> None:
    """Aggregates and their events are domain (``libs/imprint``), where the checks above
    look for them; a part of ``services/`` that defined one would escape them."""
    offenders = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and any(STORED_BASE.search(ast.unparse(b)) for b in node.bases):
                offenders.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert offenders == []


def test_every_topic_an_earlier_release_stored_resolves_to_a_versioned_event_class() -> None:
    """A golden log lists the topics its release wrote; a renamed or moved class must keep
    its old topic resolving (``register_topic``), to a class that is checked here."""
    stored = {e for a in aggregates() for e in stored_events(a)}
    manifests = sorted(GOLDEN_LOGS.glob("*/MANIFEST.json"))
    assert manifests
    unresolved = []
    for manifest in manifests:
        for log, topics in json.loads(manifest.read_text())["event_types"].items():
            for topic in topics:
                cls = resolve_topic(topic)
                if cls not in stored or declared_version(cls) is None:
                    unresolved.append(f"{manifest.parent.name}/{log}: {topic} -> {cls}")
    assert unresolved == []


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found

"""What imprint stores, found from its classes (SPEC R8): every aggregate, and every event
class an aggregate can write to a log.

eventsourcing redefines each event class nested in an aggregate as a subclass of the
class written in the source and of the aggregate's ``Event`` base (same qualified name),
and adds an ``Event`` base and, unless one is written, a ``Created`` class to every
aggregate. So the stored event classes of an aggregate are its nested event classes but

* ``Event``, the base the library gives it (never triggered itself);
* ``Created``, when another creation event is written (``Opened``, ``Registered``…): it is
  then the library's default, never used. When no creation event is written, the
  library's ``Created`` *is* stored, and — having no version — fails the checks, which is
  the point: a creation event must be written out to carry one.

An event class outside any aggregate can only be a base (its subclasses are stored);
:func:`unnested_event_classes` finds them so a check can say so.

What is stored is domain, so it lives under ``libs/imprint`` (pure: importing it here
starts nothing); the unit tier checks that ``services/`` defines none of it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

from eventsourcing.domain import BaseAggregate, CanInitAggregate, CanMutateAggregate

import imprint


def modules() -> list[ModuleType]:
    """Every module of ``imprint`` (the runtime SDK's I/O adapters are left out: they
    import their I/O library, and the SDK stores nothing)."""
    return [importlib.import_module(info.name) for info in pkgutil.walk_packages(imprint.__path__, "imprint.")
            if not info.name.startswith("imprint.runtime.")]


def _classes_of(module: ModuleType) -> Iterator[type]:
    for value in vars(module).values():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            yield value


def aggregates() -> list[type[BaseAggregate]]:
    found = {c for module in modules() for c in _classes_of(module) if issubclass(c, BaseAggregate)}
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def stored_events(aggregate: type[BaseAggregate]) -> list[type[CanMutateAggregate]]:
    """The event classes ``aggregate`` can write (see the module's docstring)."""
    nested = {name: value for name, value in vars(aggregate).items()
              if inspect.isclass(value) and issubclass(value, CanMutateAggregate) and name != "Event"}
    written_creation = any(issubclass(value, CanInitAggregate) for name, value in nested.items() if name != "Created")
    return [value for name, value in sorted(nested.items()) if not (name == "Created" and written_creation)]


def stored_event_classes() -> list[type[CanMutateAggregate]]:
    return [event for aggregate in aggregates() for event in stored_events(aggregate)]


def unnested_event_classes() -> list[type[CanMutateAggregate]]:
    """Event classes written at module level (outside any aggregate)."""
    found = {c for module in modules() for c in _classes_of(module)
             if issubclass(c, CanMutateAggregate) and "." not in c.__qualname__}
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def declared_version(cls: type) -> int | None:
    """The ``class_version`` the class written in the source declares, or ``None``.

    An event nested in an aggregate is the library's redefinition of the written class:
    both carry the same qualified name, so the declaration is looked for on either, and
    never on a base of another name (a version inherited from a base would let a new
    event class forget its own)."""
    for klass in cls.__mro__:
        if klass.__qualname__ == cls.__qualname__ and klass.__module__ == cls.__module__:
            if "class_version" in vars(klass):
                return vars(klass)["class_version"]  # type: ignore[no-any-return]
    return None


def upcast_steps(cls: type) -> list[tuple[type, int]]:
    """``(cls, n)`` for each step ``upcast_vn_v(n+1)`` that ``cls``'s version implies."""
    version = declared_version(cls) or 1
    return [(cls, n) for n in range(1, version)]


def name_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"

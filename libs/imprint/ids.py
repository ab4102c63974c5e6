"""Deterministic aggregate ids, remembered.

An aggregate's id is a uuid5 of its name (a run id, a source id and shard, a
conversation id): a pure function, asked for many times per unit of work (every
lookup of a run, a source's record and its shard), and a hash each time. :func:`remembered`
computes each one once per name and keeps the most recent :data:`REMEMBERED_IDS`.
:class:`FoundByKey` makes that one function both how an aggregate is looked up and how it is
created, once for every aggregate found by its natural key (the Journal's and Publication's)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar
from uuid import UUID

if TYPE_CHECKING:
    from imprint.workspace import Workspace

F = TypeVar("F", bound=Callable[..., object])
REMEMBERED_IDS = 16_384


def remembered(function: F) -> F:
    """``function`` (a pure id function) with its most recent results kept."""
    return functools.lru_cache(maxsize=REMEMBERED_IDS)(function)  # type: ignore[return-value]


class FoundByKey:
    """A mixin of an aggregate whose id is a pure function of its natural key.

    ``class AnswerExecution(FoundByKey, Aggregate, key=ids.execution_id, by=("run_id",))``: the one
    function ``key`` is both the aggregate's ``id_for`` (how a unit of work looks it up) and its
    ``create_id`` (how the library names a new one, passing ``by`` — the constructor's arguments
    that make the key — by name), so the id a lookup asks for is the id a creation wrote."""

    id_for: ClassVar[Callable[..., UUID]]
    """The aggregate's id, derived from its natural key."""

    def __init_subclass__(cls, /, key: Callable[..., UUID] | None = None, by: tuple[str, ...] = (),
                          **kwargs: Any) -> None:
        if key is not None:
            cls.id_for = staticmethod(key)  # type: ignore[assignment]
            cls.create_id = staticmethod(_by_name(key, by))  # type: ignore[attr-defined]
        super().__init_subclass__(**kwargs)

    @classmethod
    def found_in(cls, ws: Workspace, *key: Any) -> Self | None:
        """The aggregate of ``key`` in the unit of work ``ws``, if there is one."""
        return ws.get(cls, cls.id_for(*key))  # type: ignore[type-var]

    @classmethod
    def found_or_added(cls, ws: Workspace, *key: Any) -> Self:
        """The aggregate of ``key`` in ``ws``; a new one (for an aggregate whose constructor takes
        its key and nothing else) added to it on first sight."""
        found = cls.found_in(ws, *key)
        if found is None:
            found = cls(*key)
            ws.add(found)  # type: ignore[arg-type]
        return found


def _by_name(key: Callable[..., UUID], names: tuple[str, ...]) -> Callable[..., UUID]:
    """``key`` called with the arguments ``names``, in that order, however they are passed: the
    library reads which arguments its ``create_id`` takes from its signature, and passes them by name."""
    signature = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])

    def create_id(*arguments: Any, **named: Any) -> UUID:
        return key(*signature.bind(*arguments, **named).args)

    create_id.__signature__ = signature  # type: ignore[attr-defined]
    return create_id

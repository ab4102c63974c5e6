"""Deterministic aggregate ids, remembered.

An aggregate's id is a uuid5 of its name (a run id, a source id and shard, a
conversation id): a pure function, asked for many times per unit of work (every
lookup of a run, a source's record and its shard), and a hash each time. :func:`remembered`
computes each one once per name and keeps the most recent :data:`REMEMBERED_IDS`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])
REMEMBERED_IDS = 16_384


def remembered(function: F) -> F:
    """``function`` (a pure id function) with its most recent results kept."""
    return functools.lru_cache(maxsize=REMEMBERED_IDS)(function)  # type: ignore[return-value]

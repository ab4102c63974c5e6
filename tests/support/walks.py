"""Counting a message's walk between ``libs/`` and ``services/``: a profiler lists each
passing of control between a function defined under one and a function defined under the
other (issue 44: a walk crosses at most a handful of times — decode, prepare, handle).

Used by the walk tests of Delivery (``tests/integration/delivery/test_delivery_walk.py``) and
Publication (``tests/integration/publication/test_publication_walk.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import imprint
import services

LIBS = str(Path(imprint.__file__).resolve().parent) + "/"
SERVICES = str(Path(services.__file__).resolve().parent) + "/"

Crossing = tuple[str, str, str]
"""``("call", caller, callee)`` or ``("return", callee, caller)``, each ``<file>:<qualname>``."""


def _side(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    return "libs" if path.startswith(LIBS) else "services" if path.startswith(SERVICES) else None


def crossings(walk: Callable[[], Any]) -> list[Crossing]:
    """Run ``walk()`` (called from services' side) and list each transition of control between a
    function defined under ``libs/`` and one defined under ``services/``. Code of neither (the
    standard library, pydantic, a driver) stays on the side of whoever called it."""
    seen: list[Crossing] = []
    stack: list[tuple[str, str]] = [("services", "walk")]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        name = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_qualname}"
        if event == "call":
            side = _side(frame) or stack[-1][0]
            if side != stack[-1][0]:
                seen.append(("call", stack[-1][1], name))
            stack.append((side, name))
        elif event == "return" and len(stack) > 1:
            side, name = stack.pop()
            if side != stack[-1][0]:
                seen.append(("return", name, stack[-1][1]))

    sys.setprofile(profile)
    try:
        walk()
    finally:
        sys.setprofile(None)
    return seen


def crossed(seen: list[Crossing]) -> list[tuple[str, str]]:
    """Each crossing as ``(kind, the function on the far side)``: the callee of a call, the
    function returning of a return — what a walk test asserts, in order."""
    return [(kind, callee if kind == "call" else caller) for kind, caller, callee in seen]

"""P9: controlled numbers.

``[[num:h]]`` renders the value the Host issued for *this* run under handle
``h``, at its current version, with its unit. A handle may pin a version as
``[[num:h@3]]``; a pin that is not the current version is stale. An unknown
handle (never issued, or issued to another run — this run cannot see it), a
stale pin, or a value whose source is no longer authorized is never guessed:
it renders as the visible :data:`UNAVAILABLE` marker and the block gets
``numeric_unavailable``. Literal numbers in the text are ordinary text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from imprint.publication.facts import NumericValue

UNAVAILABLE = "⟨value unavailable⟩"

_PIN = re.compile(r"^(?P<handle>.+)@(?P<version>[0-9]{1,9})$")
_UNIT_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\[\]]")


@dataclass(frozen=True, slots=True)
class RenderedValue:
    handle_id: str
    """The handle exactly as written in the token (pin included)."""
    rendered: str
    version: int | None = None
    source_id: str | None = None

    @property
    def available(self) -> bool:
        return self.version is not None


def format_value(value: NumericValue) -> str:
    """``value`` then ``unit``; the unit is shown without brackets or control
    characters so a rendered value can never read as a token."""
    unit = _UNIT_UNSAFE.sub("", value.unit).strip()
    return f"{value.value} {unit}" if unit else value.value


def render(
    handle: str,
    numerics: Mapping[str, NumericValue],
    source_ok: Callable[[str], bool] = lambda _: True,
) -> RenderedValue:
    issued = numerics.get(handle)
    pinned: int | None = None
    if issued is None:
        match = _PIN.match(handle)
        if match is not None:
            issued = numerics.get(match.group("handle"))
            pinned = int(match.group("version"))
    if issued is None:
        return RenderedValue(handle, UNAVAILABLE)
    if pinned is not None and pinned != issued.version:
        return RenderedValue(handle, UNAVAILABLE)
    if issued.source_id is not None and not source_ok(issued.source_id):
        return RenderedValue(handle, UNAVAILABLE)
    return RenderedValue(handle, format_value(issued), issued.version, issued.source_id)

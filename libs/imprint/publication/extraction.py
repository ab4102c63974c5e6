"""P4: mechanical extraction of a block's readable text.

Readable text comes from ``markdown`` or ``table`` content (a table is rendered
as a markdown table). Control characters other than newline and tab are
removed (``\\r\\n`` and lone ``\\r`` become ``\\n``; lone surrogates, which cannot
be stored as UTF-8, go too). Role and labels are normalized; invalid optional
metadata is dropped and noted, never fatal (P8). Whitespace is otherwise kept
as written: P11 compares bodies byte for byte.

Normalization never erases a dependency identity: tokens cannot contain the
characters removed here, so cleaning can only leave a token intact. Nothing
extractable → ``empty_body``; content is never invented."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from imprint.publication.candidate import ProposedBlock
from imprint.publication.tokens import scan

ContentType = Literal["text", "table"]

KNOWN_ROLES = frozenset({"answer", "summary", "detail", "caveat", "method", "note", "conclusion"})
DEFAULT_ROLE = "answer"
MAX_LABELS = 8
MAX_LABEL_CHARS = 40
MAX_DEPENDENCIES = 32

_NEWLINES = re.compile(r"\r\n?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_LABEL_SPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Remove control characters other than ``\\n`` and ``\\t``."""
    return _CONTROL.sub("", _NEWLINES.sub("\n", text))


@dataclass(frozen=True, slots=True)
class Extracted:
    """The readable body of one proposed block, and its normalized metadata."""

    content_type: ContentType
    text: str
    role: str = DEFAULT_ROLE
    labels: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    """Names of optional fields that were invalid and dropped (``metadata_dropped``)."""


@dataclass(frozen=True, slots=True)
class NotExtractable:
    reason: Literal["empty_body", "malformed_block"]
    detail: str


def extract(block: ProposedBlock) -> Extracted | NotExtractable:
    if block.malformed is not None:
        return NotExtractable("malformed_block", block.malformed)
    dropped: list[str] = []
    parts: list[str] = []
    markdown = block.markdown
    if markdown is not None and not isinstance(markdown, str):
        return NotExtractable("malformed_block", f"markdown is a {type(markdown).__name__}, not a string")
    if isinstance(markdown, str):
        parts.append(clean(markdown))
    table_text = None
    if block.table is not None:
        table_text = render_table(block.table)
        if table_text is None:
            if markdown is None:
                return NotExtractable("malformed_block", "table is neither markdown nor {columns, rows}")
            dropped.append("table")
        else:
            parts.append(table_text)
    text = "\n\n".join(part for part in parts if part.strip()) if len(parts) > 1 else (parts[0] if parts else "")
    if not text.strip():
        return NotExtractable("empty_body", "no readable text")
    content_type: ContentType = "table" if table_text is not None and not (markdown or "").strip() else "text"
    role = normalize_role(block.role, dropped)
    labels = normalize_labels(block.display, dropped)
    depends_on = normalize_dependencies(block.depends_on, dropped)
    return Extracted(content_type, text, role, labels, depends_on, tuple(dropped))


def normalize_role(role: Any, dropped: list[str]) -> str:
    if role is None:
        return DEFAULT_ROLE
    if isinstance(role, str):
        normalized = clean(role).strip().lower()
        if normalized == "":
            return DEFAULT_ROLE
        if normalized in KNOWN_ROLES:
            return normalized
    dropped.append("role")
    return DEFAULT_ROLE


def normalize_label(label: str) -> str:
    return _LABEL_SPACE.sub(" ", clean(label)).strip().lower()


def normalize_labels(display: Any, dropped: list[str]) -> tuple[str, ...]:
    """Optional display metadata: ``{"labels": [str, …]}`` or ``{"label": str}``.
    Anything else in it is dropped and noted."""
    if display is None:
        return ()
    if not isinstance(display, dict):
        dropped.append("display")
        return ()
    raw: list[Any] = []
    for key, value in display.items():
        if key == "labels" and isinstance(value, list):
            raw.extend(value)
        elif key == "label":
            raw.append(value)
        else:
            dropped.append(f"display.{str(key)[:40]}")
    labels: dict[str, None] = {}
    for value in raw:
        label = normalize_label(value) if isinstance(value, str) else ""
        if not label or len(label) > MAX_LABEL_CHARS or len(labels) >= MAX_LABELS:
            dropped.append("display.label")
            continue
        labels.setdefault(label, None)
    return tuple(labels)


def normalize_dependencies(depends_on: Any, dropped: list[str]) -> tuple[str, ...]:
    """``depends_on``: block ids as given (no trimming — an id is exact)."""
    if depends_on is None or depends_on == []:
        return ()
    if not isinstance(depends_on, list):
        dropped.append("depends_on")
        return ()
    ids: dict[str, None] = {}
    for value in depends_on:
        if isinstance(value, str) and value and clean(value) == value and len(value) <= 200 and len(ids) < MAX_DEPENDENCIES:
            ids.setdefault(value, None)
        else:
            dropped.append("depends_on")
    return tuple(ids)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bool, int, float)):
        text = json.dumps(value)
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    text = clean(text).replace("\n", " ").replace("\t", " ")
    return _escape_pipes(text).strip()


def _escape_pipes(text: str) -> str:
    """Escape ``|`` for a table cell, but never inside a token (P4: ids stay exact)."""
    out: list[str] = []
    position = 0
    for token in scan(text):
        out.append(text[position:token.start].replace("|", "\\|"))
        out.append(token.text)
        position = token.end
    out.append(text[position:].replace("|", "\\|"))
    return "".join(out)


def render_table(table: Any) -> str | None:
    """A ``{columns, rows}`` table as markdown table text; a string is taken as
    markdown already. ``None`` when it is not a table at all. Ragged rows are
    padded with empty cells (never filled in); the header widens to the widest
    row so no cell is lost."""
    if isinstance(table, str):
        return clean(table)
    if not isinstance(table, dict):
        return None
    columns = table.get("columns", [])
    rows = table.get("rows", [])
    if not isinstance(columns, list) or not isinstance(rows, list):
        return None
    if not all(isinstance(row, list) for row in rows):
        return None
    width = max([len(columns), *(len(row) for row in rows)], default=0)
    if width == 0:
        return ""
    header = [_cell(c) for c in columns] + [""] * (width - len(columns))
    body = [[_cell(c) for c in row] + [""] * (width - len(row)) for row in rows]
    if not any(header) and not any(any(row) for row in body):
        return ""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] * width) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    return "\n".join(lines)

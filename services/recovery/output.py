"""How the recovery commands hand their results over: exit codes, JSON, a document or its table.

One JSON line (a replay's run) is canonical JSON; one document (``recover``, ``inspect``,
``export``) is indented JSON or a table of :mod:`services.recovery.render`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, TextIO

from imprint.canonical import canonical_json

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_NO_RUN = 2

Output = Literal["table", "json"]


def dump(value: Any, *, pretty: bool = False) -> str:
    """A JSON document (``pretty``: indented), or one JSON line: canonical JSON (sorted keys,
    no whitespace), written by orjson (a replay writes a line per run, each as long as the
    run's view). A value that is not JSON-shaped is written with ``str`` for what JSON has no form for."""
    if not pretty:
        try:
            return canonical_json(value)
        except TypeError:
            pass
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, indent=2 if pretty else None)


def shown(document: Mapping[str, Any], output: str, out: TextIO, table: Callable[[TextIO, Mapping[str, Any]], None]) -> int:
    """A command's one document, as pretty JSON or as its table; the command succeeded."""
    if output == "json":
        print(dump(document, pretty=True), file=out)
    else:
        table(out, document)
    return EXIT_OK


def no_run(run_id: str, err: TextIO) -> int:
    print(f"imprint: run {run_id!r} is not in the Publication log", file=err)
    return EXIT_NO_RUN

"""A golden folder (``tests/golden/logs/<release>/``) and how its stores are put back.

    MANIFEST.json              release, the commit that made it, its runs and accounts,
                               the sha256 of every other file, the event types each log holds
    sqlite/publication.sqlite  the stores of the SQLite workload (see ``stores.py``)
    sqlite/journal.sqlite
    sqlite/keyring.sqlite
    postgres/dump.sql          the same workload written to PostgreSQL, schema-agnostic
    expected/replay.jsonl      ``imprint replay --json --bodies``
    expected/verify.jsonl      ``imprint replay --verify --json``
    expected/answer/<run>.json ``GET /v1/runs/<run>/answer`` as the run's account

The expected outputs are one set for both backends: the workload is written with the
same pinned clock and message ids to each, and the generator refuses to make a folder
whose backends disagree."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.settings import Settings
from tests.golden import stores
from tests.support.net import free_port
from tests.support.postgres import drop_schema

LOGS = Path(__file__).resolve().parent / "logs"
BACKENDS = ("sqlite", "postgres")
MANIFEST = "MANIFEST.json"
STORE_FILES = tuple(f"sqlite/{name}" for name in stores.SQLITE_FILES) + ("postgres/dump.sql",)
OUTPUT_FILES = ("replay.jsonl", "verify.jsonl")


def releases() -> list[str]:
    return sorted(p.name for p in LOGS.iterdir() if p.is_dir()) if LOGS.is_dir() else []


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Golden:
    path: Path

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.path / MANIFEST).read_text())  # type: ignore[no-any-return]

    @property
    def runs(self) -> dict[str, str]:
        """Run id → the account that reads it."""
        return dict(self.manifest["runs"])

    def outputs(self) -> list[str]:
        """Every expected output's path under ``expected/``."""
        return [*OUTPUT_FILES, *(f"answer/{run_id}.json" for run_id in self.runs)]

    def expected(self, name: str) -> bytes:
        return (self.path / "expected" / name).read_bytes()

    def problems(self) -> list[str]:
        """What is missing, unlisted or changed since the folder was made (nothing: complete)."""
        if not (self.path / MANIFEST).is_file():
            return [f"{MANIFEST} is missing"]
        manifest = self.manifest
        found: list[str] = []
        if manifest.get("release") != self.path.name:
            found.append(f"{MANIFEST} names release {manifest.get('release')!r}")
        if not manifest.get("runs"):
            found.append(f"{MANIFEST} names no runs")
        listed: dict[str, str] = manifest.get("files", {})
        required = [*STORE_FILES, *(f"expected/{name}" for name in self.outputs())]
        found += [f"{name} is missing" for name in required if not (self.path / name).is_file()]
        found += [f"{name} is not listed in {MANIFEST}" for name in required if name not in listed]
        present = {p.relative_to(self.path).as_posix() for p in self.path.rglob("*") if p.is_file()} - {MANIFEST}
        found += [f"{name} is not part of a golden folder" for name in sorted(present - set(required))]
        found += [f"{name} differs from the sha256 it was made with" for name in sorted(present & set(listed))
                  if digest((self.path / name).read_bytes()) != listed[name]]
        return found


def serving_settings(base: Settings, state_dir: Path, schema: str | None) -> Settings:
    """Settings of one replay-and-serve: its own state folder, schema (PostgreSQL only),
    topics, consumer groups and HTTP port; one partition per topic."""
    tag = uuid.uuid4().hex[:10]
    return base.model_copy(update={
        "state_dir": state_dir, "database_schema": schema,
        "database_url": base.database_url if schema else None,
        "topic_prefix": f"g{tag}.", "group_prefix": f"imprint-golden-{tag}", "topic_partitions": 1,
        "http_host": "127.0.0.1", "http_port": free_port(),
    })


@contextmanager
def restored(golden: Path, backend: str, base: Settings, state_dir: Path) -> Iterator[Settings]:
    """The golden stores of ``backend``, copied into a fresh state folder (SQLite) or
    restored into a fresh schema (PostgreSQL, dropped afterwards)."""
    assert backend in BACKENDS, backend
    if backend == "sqlite":
        settings = serving_settings(base, state_dir, None)
        stores.load_sqlite(golden / "sqlite", state_dir)
        yield settings
        return
    settings = serving_settings(base, state_dir, f"t_golden_{uuid.uuid4().hex[:10]}")
    try:
        stores.restore_postgres((golden / "postgres" / "dump.sql").read_text(), settings)
        yield settings
    finally:
        drop_schema(settings)

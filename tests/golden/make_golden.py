"""``python -m tests.golden.make_golden <release>``: a new golden folder, made by the code
of this checkout (SPEC R8; ``tests/golden/README.md``).

It writes the workload (``workload.py``) twice — into SQLite files and into a PostgreSQL
schema — keeps the stores (``stores.py``), then puts each backend's stores back twice
into fresh places and observes them (``serving.py``): replay, verify and every run's
``/answer``. All four observations must agree byte for byte, or nothing is written.
An existing folder is never replaced.

Needs Kafka and PostgreSQL: ``IMPRINT_KAFKA_BOOTSTRAP`` and ``IMPRINT_DATABASE_URL``."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from services.common.backends import backend_for
from services.common.settings import Settings
from tests.golden import stores, workload
from tests.golden.folder import BACKENDS, LOGS, MANIFEST, Golden, digest, restored
from tests.golden.serving import observe
from tests.support.kafka import delete_created_topics
from tests.support.postgres import drop_schema

RELEASE = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9][a-z0-9.-]*$")


def make(release: str, base: Settings) -> Path:
    target = LOGS / release
    if target.exists():
        raise SystemExit(f"{target} exists: a golden log is never regenerated (see tests/golden/README.md)")
    with tempfile.TemporaryDirectory(prefix="golden-") as temporary:
        work = Path(temporary)
        staging = work / release
        write_stores(base, work, staging)
        observed = {}
        for backend in BACKENDS:
            for attempt in (1, 2):
                with restored(staging, backend, base, work / f"serve-{backend}-{attempt}") as settings:
                    observed[backend, attempt] = observe(settings, workload.RUNS)
        first = observed[BACKENDS[0], 1]
        for key, outputs in observed.items():
            differing = sorted(name for name in first.keys() | outputs.keys() if first.get(name) != outputs.get(name))
            if differing:
                raise SystemExit(f"{key} observed differently from {(BACKENDS[0], 1)}: {differing}")
        for name, data in first.items():
            path = staging / "expected" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        write_manifest(staging, release)
        problems = Golden(staging).problems()
        assert not problems, problems
        LOGS.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, target)
    return target


def write_stores(base: Settings, work: Path, staging: Path) -> None:
    sqlite = Settings(_env_file=None, state_dir=work / "write-sqlite", database_url=None)  # type: ignore[call-arg]
    workload.write(sqlite)
    stores.save_sqlite(sqlite.state_dir, staging / "sqlite")
    # The schema's name is rewritten out of the dump, so it must be one no data contains.
    postgres = base.model_copy(update={"state_dir": work / "write-postgres",
                                       "database_schema": f"golden_{uuid.uuid4().hex[:12]}"})
    backend_for(postgres).prepare()
    try:
        workload.write(postgres)
        (staging / "postgres").mkdir(parents=True)
        (staging / "postgres" / "dump.sql").write_text(stores.dump_postgres(postgres))
    finally:
        drop_schema(postgres)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=LOGS.parents[2]).stdout.strip()


def write_manifest(staging: Path, release: str) -> None:
    event_types = {}
    for log in ("publication", "journal"):
        with sqlite3.connect(staging / "sqlite" / f"{log}.sqlite") as connection:
            topics = Counter(topic for (topic,) in connection.execute("SELECT topic FROM stored_events"))
        connection.close()
        event_types[log] = dict(sorted(topics.items()))
    files = {p.relative_to(staging).as_posix(): digest(p.read_bytes())
             for p in sorted(staging.rglob("*")) if p.is_file()}
    manifest = {
        "release": release,
        "made_by": {"commit": git("rev-parse", "HEAD"),
                    "uncommitted_changes": bool(git("status", "--porcelain", "--", ".", ":(exclude)tests/golden/logs")),
                    "command": f"python -m tests.golden.make_golden {release}",
                    "at": datetime.now(UTC).isoformat(timespec="seconds")},
        "clock_starts": workload.START.isoformat(),
        "runs": workload.RUNS,
        "event_types": event_types,
        "files": files,
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not RELEASE.match(argv[0]):
        print("usage: python -m tests.golden.make_golden <YYYY-MM-DD-name>", file=sys.stderr)
        return 2
    base = Settings()
    if backend_for(base).name != "postgres":
        print("make_golden needs IMPRINT_DATABASE_URL (PostgreSQL) and IMPRINT_KAFKA_BOOTSTRAP", file=sys.stderr)
        return 2
    try:
        print(make(argv[0], base))
    finally:
        delete_created_topics()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A golden log's stores, saved and loaded: the SQLite files and a PostgreSQL dump.

What a golden log keeps is what reading and serving it needs: the Publication log (its
events, snapshots and consumer positions), the conversation keyring (bodies are sealed
under per-conversation keys, ``services.publication.sealing``) and the Journal's log
(Delivery learns a run's account and lifecycle from ``imprint.runs.v1``, which the
Journal's relay derives from it). The Journal's mutable message index is left out: it
is not a log and nothing replayed or served here reads it.

The dump is plain SQL (``INSERT`` statements, no ``COPY`` block and no psql
meta-command), with every mention of its schema written ``"__SCHEMA__"``:
:func:`restore_postgres` (or ``CREATE SCHEMA <name>``, then ``sed 's/__SCHEMA__/<name>/g'
dump.sql | psql``) puts it into a fresh schema of any name."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import psycopg

from services.common.backends import backend_for
from services.common.settings import Settings

SQLITE_FILES = ("publication.sqlite", "journal.sqlite", "keyring.sqlite")
"""The files under a state folder's ``data/`` that a golden log keeps (``services.common.backends``,
``services.common.keyring``)."""
POSTGRES_TABLES = ("publication_events", "publication_snapshots", "publication_tracking",
                   "journal_events", "journal_tracking", "imprint_conversation_keys")
PLACEHOLDER = "__SCHEMA__"
_SAFE_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def save_sqlite(state_dir: Path, into: Path) -> None:
    """Each store as one compact file (``VACUUM INTO``: its write-ahead log folded in, no free pages)."""
    into.mkdir(parents=True, exist_ok=True)
    for name in SQLITE_FILES:
        with sqlite3.connect(Path(state_dir) / "data" / name) as connection:
            connection.execute("VACUUM INTO ?", (str(into / name),))
        connection.close()


def load_sqlite(golden: Path, state_dir: Path) -> None:
    """Copies of the golden files into a fresh state folder (the golden files are never opened)."""
    data = Path(state_dir) / "data"
    data.mkdir(parents=True, exist_ok=False)
    for name in SQLITE_FILES:
        shutil.copyfile(golden / name, data / name)


def dump_postgres(settings: Settings) -> str:
    """``pg_dump`` of the golden tables of ``settings.database_schema``, made schema-agnostic."""
    schema = settings.database_schema
    assert settings.database_url and schema and _SAFE_SCHEMA.match(schema), schema
    url = urlparse(settings.database_url)
    command = ["pg_dump", "--no-owner", "--no-privileges", "--column-inserts", "--rows-per-insert=100",
               "--host", url.hostname or "127.0.0.1", "--port", str(url.port or 5432),
               "--username", unquote(url.username or "imprint"), "--dbname", url.path.lstrip("/")]
    for table in POSTGRES_TABLES:
        command += ["--table", f"{schema}.{table}"]
    dumped = subprocess.run(command, check=True, capture_output=True, text=True,
                            env={"PGPASSWORD": unquote(url.password or ""), "PATH": "/usr/bin:/bin:/usr/local/bin"})
    return agnostic(dumped.stdout, schema)


def agnostic(dump: str, schema: str) -> str:
    """Every mention of ``schema`` as ``"__SCHEMA__"``; comments and psql meta-commands dropped.
    The schema name is one no data can contain (``golden_…``), so a textual rewrite is exact."""
    lines = [line for line in dump.splitlines() if not line.startswith(("--", "\\"))]
    text = "\n".join(lines)
    text = text.replace(f'"{schema}"', f'"{PLACEHOLDER}"')
    text = re.sub(rf"(?<![\w\"]){re.escape(schema)}(?![\w\"])", f'"{PLACEHOLDER}"', text)
    assert schema not in text, "a mention of the schema was left in the dump"
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def restore_postgres(dump: str, settings: Settings) -> None:
    """The dump into ``settings.database_schema`` (created if missing), which must hold no table yet."""
    schema = settings.database_schema
    assert settings.database_url and schema and '"' not in schema and "'" not in schema, schema
    backend_for(settings).prepare()
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        with connection.transaction():
            connection.execute(dump.replace(PLACEHOLDER, schema).encode())  # type: ignore[call-overload]

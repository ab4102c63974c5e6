"""A plaintext dump of every table of one test's stores, on its backend: the tables of its
PostgreSQL schema (what ``pg_dump --data-only`` shows), or of every SQLite file under its
state folder (the embedded default), each row as text with byte cells decoded."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from services.common.settings import Settings


def dump_schema(settings: Settings) -> str:
    """Every row of every table of the deployment's stores, one line each (``table: a | b``)."""
    lines = _postgres_rows(settings) if settings.database_url else _sqlite_rows(Path(settings.state_dir) / "data")
    assert lines, "the stores are empty: nothing was dumped"
    return "\n".join(lines)


def _cell(cell: Any) -> str:
    if isinstance(cell, (bytes, memoryview)):
        return bytes(cell).decode("utf-8", errors="replace")
    return str(cell)


def _postgres_rows(settings: Settings) -> list[str]:
    assert settings.database_url and settings.database_schema
    lines: list[str] = []
    with psycopg.connect(settings.database_url) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (settings.database_schema,))]
        for table in tables:
            qualified = sql.Identifier(settings.database_schema, table)
            for row in connection.execute(sql.SQL("SELECT * FROM {}").format(qualified)):
                lines.append(f"{table}: " + " | ".join(_cell(cell) for cell in row))
    return lines


def _sqlite_rows(data: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(data.glob("*.sqlite")):
        connection = sqlite3.connect(path)
        try:
            tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                for row in connection.execute(f'SELECT * FROM "{table}"'):
                    lines.append(f"{path.stem}_{table}: " + " | ".join(_cell(cell) for cell in row))
        finally:
            connection.close()
    return lines

"""A plaintext dump of every table in one test's PostgreSQL schema (what `pg_dump --data-only` shows)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from services.common.settings import Settings


def dump_schema(settings: Settings) -> str:
    assert settings.database_url and settings.database_schema
    lines: list[str] = []
    with psycopg.connect(settings.database_url) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (settings.database_schema,))]
        for table in tables:
            qualified = sql.Identifier(settings.database_schema, table)
            for row in connection.execute(sql.SQL("SELECT * FROM {}").format(qualified)):
                cells = []
                for cell in row:
                    if isinstance(cell, (bytes, memoryview)):
                        cells.append(bytes(cell).decode("utf-8", errors="replace"))
                    else:
                        cells.append(str(cell))
                lines.append(f"{table}: " + " | ".join(cells))
    assert lines, "the schema is empty: nothing was dumped"
    return "\n".join(lines)

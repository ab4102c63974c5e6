from __future__ import annotations

import psycopg
from psycopg import sql

from services.common.settings import Settings


def drop_schema(settings: Settings) -> None:
    if not (settings.database_url and settings.database_schema):
        return
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.database_schema)))

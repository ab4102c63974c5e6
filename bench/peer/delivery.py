"""The peer's delivery writer: one published block per call → one frame row ``INSERT`` and
one ``NOTIFY`` carrying it, in one transaction on a pooled psycopg connection.

``python -m bench.peer.delivery BOOTSTRAP OUTPUT_TOPIC DATABASE_URL SCHEMA``"""

from __future__ import annotations

import asyncio
import logging
import json
import sys
from typing import Any

from faststream import FastStream
from faststream.kafka import KafkaBroker
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

FRAME_EVENT = "answer-publication"
"""The SSE event a published block is sent as (the name imprint's Delivery gives it)."""


def channel(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of one bench run's frames (channels are per database)."""
    return f"{schema}_frames"


def frames_table(schema: str) -> sql.Composed:
    return sql.SQL("{}.peer_frames").format(sql.Identifier(schema))


def create_frames(connection: Any, schema: str) -> None:
    """The frames table, on a synchronous connection (the bench creates it before the peer starts)."""
    connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, run_id text NOT NULL, "
                               "event text NOT NULL, data text NOT NULL)").format(frames_table(schema)))
    connection.execute(sql.SQL("CREATE INDEX IF NOT EXISTS peer_frames_run ON {} (run_id, id)").format(
        frames_table(schema)))


def main(bootstrap: str, output_topic: str, database_url: str, schema: str) -> None:
    pool = AsyncConnectionPool(database_url, open=False)
    insert = sql.SQL("INSERT INTO {} (run_id, event, data) VALUES (%s, %s, %s) RETURNING id").format(
        frames_table(schema))
    broker = KafkaBroker(bootstrap, log_level=logging.DEBUG)  # each message's log line off, as imprint's parts run
    app = FastStream(broker)

    @app.on_startup
    async def open_pool() -> None:
        await pool.open()

    @app.after_shutdown
    async def close_pool() -> None:
        await pool.close()

    @broker.subscriber(output_topic, group_id=f"{output_topic}.delivery", auto_offset_reset="earliest")
    async def on_published(body: dict[str, Any]) -> None:
        data = json.dumps(body["block"])
        async with pool.connection() as connection:  # commits on the way out
            cursor = await connection.execute(insert, (body["run_id"], FRAME_EVENT, data))
            row = await cursor.fetchone()
            assert row is not None
            frame = {"id": row[0], "run_id": body["run_id"], "event": FRAME_EVENT, "data": data}
            await connection.execute("SELECT pg_notify(%s, %s)", (channel(schema), json.dumps(frame)))

    asyncio.run(app.run())


if __name__ == "__main__":
    main(*sys.argv[1:5])

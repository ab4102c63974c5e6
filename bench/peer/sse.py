"""The peer's SSE endpoint: ``GET /v1/runs/{run_id}/events`` streams the run's stored frames,
then every frame ``NOTIFY`` announces for it, heard on one ``LISTEN`` connection.

``python -m bench.peer.sse DATABASE_URL SCHEMA HOST PORT``"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import uvicorn
from fastapi import FastAPI
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from sse_starlette import EventSourceResponse

from bench.peer.delivery import channel, frames_table


def create_app(database_url: str, schema: str) -> FastAPI:
    pool = AsyncConnectionPool(database_url, open=False)
    clients: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
    stored = sql.SQL("SELECT id, event, data FROM {} WHERE run_id = %s ORDER BY id").format(frames_table(schema))

    async def listen() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as connection:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema))))
            async for notice in connection.notifies():
                frame = json.loads(notice.payload)
                for queue in clients.get(frame["run_id"], ()):
                    queue.put_nowait(frame)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.open()
        listener = asyncio.create_task(listen())
        yield
        listener.cancel()
        await pool.close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/v1/runs/{run_id}/events")
    async def events(run_id: str) -> EventSourceResponse:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        clients[run_id].add(queue)  # before reading the stored frames: none falls between

        async def frames() -> AsyncIterator[dict[str, Any]]:
            try:
                last = 0
                async with pool.connection() as connection:
                    rows = await (await connection.execute(stored, (run_id,))).fetchall()
                for id_, event, data in rows:
                    last = id_
                    yield {"id": str(id_), "event": event, "data": data}
                while True:
                    frame = await queue.get()
                    if frame["id"] > last:
                        yield {"id": str(frame["id"]), "event": frame["event"], "data": frame["data"]}
            finally:
                clients[run_id].discard(queue)
                if not clients[run_id]:
                    clients.pop(run_id, None)

        return EventSourceResponse(frames(), sep="\n")  # "\n": what the bench's lean client splits frames on

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main(database_url: str, schema: str, host: str, port: str) -> None:
    uvicorn.run(create_app(database_url, schema), host=host, port=int(port), log_level="warning")


if __name__ == "__main__":
    main(*sys.argv[1:5])

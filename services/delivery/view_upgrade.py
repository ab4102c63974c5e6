"""Delivery's tables written in an earlier layout, moved to the current one in place, once.

The earlier store kept each run's whole answer state in one ``views`` row, rewritten per
poll, numbered conflicts by time, and (later) each block's display entry beside its
state. Opening such a store moves it: block rows from the answer states, each key's live
frame from the frames that still have a body, conflicts numbered in detection order, the
display column dropped (it is derived from the state when read), a frame's
``traceparent`` column added (``NULL`` for the frames it already holds), a conversation's
``last_entry_id`` (D9) added at 0. Frames, ids, positions
and delivery states stay as they are. A store in the current layout costs a look at the
catalog and nothing else."""

from __future__ import annotations

import json
from typing import Any

from imprint.delivery import merge
from imprint.delivery.frames import skeleton
from services.common.observability import get_logger
from services.delivery.view_tables import BLOCK_COLUMNS, CONFLICT_COLUMNS, SCHEMA, ViewTables

log = get_logger(__name__)


def upgrade(views: ViewTables) -> None:
    with views.tables.transaction(commit=True) as c:
        runs = views.columns(c, "runs")
        if "version" not in runs:
            c.execute(views.q("ALTER TABLE {runs} ADD COLUMN version BIGINT NOT NULL DEFAULT 0"))
        if "display" in views.columns(c, "blocks"):
            c.execute(views.q("ALTER TABLE {blocks} DROP COLUMN display"))
        if "traceparent" not in views.columns(c, "frames"):  # X9: the span that appended a frame
            c.execute(views.q("ALTER TABLE {frames} ADD COLUMN traceparent TEXT"))
        if "last_entry_id" not in views.columns(c, "conversations"):  # D9: the conversation stream
            c.execute(views.q("ALTER TABLE {conversations} ADD COLUMN last_entry_id BIGINT NOT NULL DEFAULT 0"))
        if "live_frames" in runs:
            return
        log.info("upgrading the delivery view store to the appending layout")
        c.execute(views.q("ALTER TABLE {runs} ADD COLUMN live_frames TEXT NOT NULL DEFAULT '{{}}'"))
        c.execute(views.q("ALTER TABLE {runs} ADD COLUMN conflict_count BIGINT NOT NULL DEFAULT 0"))
        live = _live_frames(views, c)
        _blocks_from_views(views, c, live)
        _run_keys(views, c, live)
        if "seq" not in views.columns(c, "conflicts"):
            _number_conflicts(views, c)
        c.execute(views.q("DROP TABLE IF EXISTS {views}"))


def _live_frames(views: ViewTables, c: Any) -> dict[tuple[str, str], tuple[int, str]]:
    live: dict[tuple[str, str], tuple[int, str]] = {}
    c.execute(views.q("SELECT run_id, frame_id, event, data, body_sha256, skey FROM {frames} "
                      "WHERE superseded = 0 AND skey IS NOT NULL ORDER BY run_id, frame_id"))
    for row in c.fetchall():
        live[(row["run_id"], row["skey"])] = (int(row["frame_id"]), json.dumps(
            skeleton(row["event"], json.loads(row["data"]), row["body_sha256"]), ensure_ascii=False))
    return live


def _blocks_from_views(views: ViewTables, c: Any, live: dict[tuple[str, str], tuple[int, str]]) -> None:
    if "state" not in views.columns(c, "views"):
        return
    from services.delivery.view_workspace import now

    stamp, rows = now(), []
    c.execute(views.q("SELECT run_id, state FROM {views}"))
    for row in c.fetchall():
        answer = merge.AnswerState.model_validate_json(row["state"])
        for block_id, state in answer.blocks.items():
            frame_id, frame_skeleton = live.get((row["run_id"], f"block:{block_id}"), (None, None))
            rows.append((row["run_id"], block_id, state.model_dump_json(), frame_id, frame_skeleton, stamp))
    if rows:
        views.insert_rows(c, "{blocks}", BLOCK_COLUMNS, rows)


def _run_keys(views: ViewTables, c: Any, live: dict[tuple[str, str], tuple[int, str]]) -> None:
    run_keys: dict[str, dict[str, list[Any]]] = {}
    for (run_id, key), (frame_id, frame_skeleton) in live.items():
        if not key.startswith("block:"):
            run_keys.setdefault(run_id, {})[key] = [frame_id, frame_skeleton]
    if run_keys:
        c.executemany(views.q("UPDATE {runs} SET live_frames = ? WHERE run_id = ?"),
                      [(json.dumps(keys), run_id) for run_id, keys in run_keys.items()])


def _number_conflicts(views: ViewTables, c: Any) -> None:
    c.execute(views.q("SELECT * FROM {conflicts} ORDER BY run_id, detected_at"))
    rows = [dict(row) for row in c.fetchall()]
    c.execute(views.q("DROP TABLE {conflicts}"))
    c.execute(views.q(next(s for s in SCHEMA if s.startswith("CREATE TABLE IF NOT EXISTS {conflicts}"))))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["run_id"]] = counts.get(row["run_id"], 0) + 1
        row["seq"] = counts[row["run_id"]]
    if rows:
        views.insert_rows(c, "{conflicts}", CONFLICT_COLUMNS, [tuple(row[name] for name in CONFLICT_COLUMNS)
                                                               for row in rows])
    c.executemany(views.q("UPDATE {runs} SET conflict_count = ? WHERE run_id = ?"),
                  [(n, run_id) for run_id, n in counts.items()])

"""The view store appends and touches only what a batch names (SQLite; the same SQL runs
on PostgreSQL in tests/integration/delivery): it ends with exactly the frames, skeletons
and answer view of a pure fold that re-derives everything from the whole run, and the
statements a message costs do not depend on how long the run already is."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from imprint.contracts.runs import RunClosed
from imprint.delivery import merge
from imprint.delivery.frames import RunProjection, skeleton, terminal_drafts
from imprint.delivery.handling import step
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.view_store import ViewStore
from tests.support.delivery_builders import (
    closed,
    preview,
    published,
    rejected,
    revision_rejected,
    running,
    save_failed,
    save_unknown,
    settled,
    unchanged,
    withdrawn,
)

RUN = "run-append"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ViewStore]:
    s = ViewStore(Settings(state_dir=tmp_path / "state", database_url=None))
    yield s
    s.close()


class Feed:
    def __init__(self) -> None:
        self.offsets = {"imprint.publication.v1": 0, "imprint.runs.v1": 0}

    def __call__(self, *messages: Any) -> list[Inbound]:
        out = []
        for m in messages:
            topic = "imprint.runs.v1" if m.type.startswith(("run.", "conversation.")) else "imprint.publication.v1"
            out.append(Inbound(topic, 0, self.offsets[topic], m))
            self.offsets[topic] += 1
        return out


class Reference:
    """The whole-run fold: every frame kept in memory, every key's older frames stripped."""

    def __init__(self) -> None:
        self.projection = RunProjection.new(RUN)
        self.frames: list[dict[str, Any]] = []

    def _append(self, draft: Any) -> None:
        if draft.key is not None:
            for f in self.frames:
                if f["key"] == draft.key and not f["superseded"]:
                    f["data"], f["superseded"] = skeleton(f["event"], f["data"], f["sha"]), True
        self.frames.append({"id": len(self.frames) + 1, "event": draft.event, "data": draft.data,
                            "sha": draft.body_sha256, "key": draft.key, "superseded": False})

    def batch(self, messages: list[Any]) -> None:
        ordered = [m for m in messages if not isinstance(m, RunClosed)]
        ordered += [m for m in messages if isinstance(m, RunClosed)]
        for message in ordered:
            result = step(self.projection, message)
            for draft in result.drafts:
                self._append(draft)
            if result.terminal:
                for draft in terminal_drafts([(f["id"], f["sha"]) for f in self.frames]):
                    self._append(draft)
            for block_id in result.hidden_after_terminal:
                for f in self.frames:
                    if f["key"] == f"block:{block_id}":
                        f["data"] = skeleton(f["event"], f["data"], f["sha"], reason="withdrawn")

    def held(self) -> list[tuple[int, str, Any]]:
        return [(f["id"], f["event"], json.loads(json.dumps(f["data"], ensure_ascii=False))) for f in self.frames]


def script(seed: int, end: str = "completed") -> list[list[Any]]:
    """A run's publication traffic over six blocks, cut into batches of 1–7 messages; the run
    ends ``end`` (``stopped``: its runtime stopped it at its user's request, X11)."""
    rng = random.Random(seed)
    revisions = {f"b{i}": 0 for i in range(1, 7)}
    messages: list[Any] = [running(RUN)]
    for n in range(120):
        block_id = rng.choice(list(revisions))
        ordinal = int(block_id[1:])
        roll = rng.random()
        revision = revisions[block_id] + 1
        body = f"{block_id} r{revision}"
        candidate = f"c{n}"
        if roll < 0.30:
            messages.append(preview(RUN, block_id, revision, body, ordinal, candidate=candidate))
            if rng.random() < 0.7:
                other = body if rng.random() < 0.9 else body + " (another body)"
                messages.append(published(RUN, block_id, revision, other, ordinal, candidate=candidate))
                revisions[block_id] = revision
        elif roll < 0.55:
            messages.append(published(RUN, block_id, revision, body, ordinal, candidate=candidate))
            revisions[block_id] = revision
        elif roll < 0.62:
            messages.append(withdrawn(RUN, block_id, max(1, revision - 1), "source_revoked", source_id="src-private"))
        elif roll < 0.68:
            messages.append(preview(RUN, block_id, revision, body, ordinal, candidate=candidate))
            messages.append(rejected(RUN, candidate, block_id=block_id,
                                     reason=rng.choice(["unauthorized_source", "malformed_block"])))
        elif roll < 0.74:
            messages.append(preview(RUN, block_id, revision, body, ordinal, candidate=candidate))
            messages.append(revision_rejected(RUN, candidate, block_id, reason="quota_exceeded"))
        elif roll < 0.82:
            messages.append(preview(RUN, block_id, revision, body, ordinal, candidate=candidate))
            names = [] if rng.random() < 0.5 else [block_id]  # no names: every block of the run
            if rng.random() < 0.5:
                messages.append(save_failed(RUN, candidate, names))
            else:
                messages.append(save_unknown(RUN, candidate, names))
        elif roll < 0.88:
            messages.append(preview(RUN, block_id, revision, body, ordinal, candidate=candidate))
            messages.append(unchanged(RUN, candidate, block_id, revision - 1))
        else:
            messages.append(rejected(RUN, candidate, reason="empty_body"))
    if end == "stopped":
        messages += [preview(RUN, "b7", 1, "b7 r1, cut short by the stop", 7, candidate="c-cut"),
                     settled(RUN, "stopped"), closed(RUN, None, state="stopped")]
    else:
        messages += [settled(RUN), closed(RUN, "the closed answer " * 3)]
    messages.append(withdrawn(RUN, "b1", revisions["b1"] or 1, "source_tombstoned"))
    batches: list[list[Any]] = []
    while messages:
        size = rng.randint(1, 7)
        batches.append(messages[:size])
        messages = messages[size:]
    return batches


@pytest.mark.rule("D1")
@pytest.mark.rule("P16")
@pytest.mark.rule("P17")
@pytest.mark.rule("P21")
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_appending_per_batch_ends_where_the_whole_run_fold_ends(store: ViewStore, seed: int) -> None:
    feed, reference = Feed(), Reference()
    for batch in script(seed):
        store.process(feed(*batch))
        reference.batch(batch)
    frames = [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0, limit=10_000)]
    assert frames == reference.held(), "same ids, events, bodies and skeletons as the whole-run fold"
    answer = reference.projection.answer
    view = store.answer_view(RUN)
    assert view == {"blocks": merge.view(answer),
                    "conflicts": [{"block_id": c.block_id, "revision": c.revision} for c in answer.conflicts]}
    assert store.run(RUN).terminal  # type: ignore[union-attr]


@pytest.mark.rule("X11")
@pytest.mark.rule("P14")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_stopped_runs_end_drops_its_previews_in_the_store_as_in_the_whole_run_fold(store: ViewStore,
                                                                                    seed: int) -> None:
    feed, reference = Feed(), Reference()
    for batch in script(seed, end="stopped"):
        store.process(feed(*batch))
        reference.batch(batch)
    frames = [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0, limit=10_000)]
    assert frames == reference.held()
    dropped = [data for _, event, data in frames if event == "answer-preview" and data.get("status") == "dropped"]
    assert dropped, "the script leaves previews that were never committed"
    view = store.answer_view(RUN)
    assert view is not None and view["blocks"] == merge.view(reference.projection.answer)
    assert {b["status"] for b in view["blocks"]} <= {"saved", "conflict"}, "no preview outlives a stopped run"


@pytest.mark.rule("D1")
def test_a_redelivered_batch_in_the_middle_of_a_run_changes_nothing(store: ViewStore) -> None:
    feed = Feed()
    batches = [feed(*batch) for batch in script(7)]
    for batch in batches[:10]:
        store.process(batch)
    before = [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0, limit=10_000)]
    view = store.answer_view(RUN)
    for batch in batches[3:10]:
        assert store.process(batch) == []
    assert [(f.id, f.event, f.data) for f in store.frames_after(RUN, 0, limit=10_000)] == before
    assert store.answer_view(RUN) == view


@contextmanager
def recording(store: ViewStore) -> Iterator[list[tuple[str, int]]]:
    """Every statement a transaction runs, with the rows it writes: an ``executemany``'s
    row count, or the tuples of a multi-row ``VALUES`` list. A ``WITH v AS (VALUES …)
    UPDATE`` is recorded from its ``UPDATE`` on."""
    statements: list[tuple[str, int]] = []
    original = store.tables.transaction

    def rows_of(sql: str, params: Any) -> int:
        values = re.search(r"VALUES (\([^)]*\))", sql)
        width = values.group(1).count("?") + values.group(1).count("%s") if values else 0
        return len(params) // width if width and params else 1

    class Cursor:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def execute(self, sql: Any, params: Any = ()) -> Any:
            text = str(sql)
            shown = text[text.index(" UPDATE ") + 1:] if text.startswith("WITH ") else text
            statements.append((shown, rows_of(text, params)))
            return self.inner.execute(sql, params)

        def executemany(self, sql: Any, rows: Any) -> Any:
            rows = list(rows)
            statements.append((str(sql), len(rows)))
            return self.inner.executemany(sql, rows)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    @contextmanager
    def transaction(*, commit: bool) -> Iterator[Any]:
        with original(commit=commit) as c:
            yield Cursor(c)

    store.tables.transaction = transaction  # type: ignore[method-assign]
    try:
        yield statements
    finally:
        store.tables.transaction = original  # type: ignore[method-assign]


@pytest.mark.rule("D1")
def test_a_message_costs_the_same_statements_whatever_the_run_holds(store: ViewStore) -> None:
    feed = Feed()
    shapes = []
    for run_id, history in (("run-short", 5), ("run-long", 300)):
        store.process(feed(running(run_id), *[published(run_id, f"old{i}", 1, f"old {i}", i + 1) for i in range(history)]))
        with recording(store) as statements:
            store.process(feed(preview(run_id, "old1", 2, "a revision", candidate="c-rev"),
                               published(run_id, "old1", 2, "a revision", candidate="c-rev"),
                               published(run_id, "fresh", 1, "a new block", history + 1)))
        shapes.append(statements)
    assert shapes[0] == shapes[1], "the same statements and row counts at 5 and at 300 blocks of history"
    counts = {sql.split(" (")[0].split(" SET ")[0]: rows for sql, rows in shapes[1]}
    assert counts["INSERT INTO delivery_frames"] == 3
    assert counts["UPDATE delivery_frames"] == 1, "one earlier frame of old1 loses its body, nothing else"
    assert counts["INSERT INTO delivery_blocks"] == 2, "only the two blocks the batch named"

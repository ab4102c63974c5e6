"""The view store, one body per rule on each of its backends (the embedded SQLite
default and PostgreSQL; the ``backend`` fixture): per-run ids, tracking-based dedupe,
restart, skeletons, purge, delivery state."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from imprint.delivery import merge
from imprint.delivery.feeds import conversation_feed, notice_feed
from imprint.delivery.summary import validate_stream
from services.common.settings import Settings
from services.common.inbound import Inbound
from services.delivery.view_store import ViewStore
from tests.support.backends import Backend
from tests.support.feeder import Feeder
from tests.support.delivery_builders import closed, deleted, preview, published, running, settled, withdrawn

RUN = "run-s"


pytestmark = pytest.mark.integration
each_backend = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
"""A rule of the store, whatever holds it: one body per backend."""


@pytest.fixture
def settings(backend: Backend) -> Settings:
    return backend.settings


@pytest.fixture
def store(settings: Settings) -> Iterator[ViewStore]:
    s = ViewStore(settings)
    yield s
    s.close()


def Feed() -> Callable[..., list[Inbound]]:  # noqa: N802 - reads like the records it makes
    """Records as Delivery's consumer gets them (the one feeder), offsets from 0 per topic."""
    return Feeder(lambda batch: batch).wrap


def held(store: ViewStore, run_id: str = RUN) -> list[tuple[int, str, object]]:
    return [(f.id, f.event, f.data) for f in store.frames_after(run_id, 0)]


@each_backend
@pytest.mark.rule("D1")
def test_frame_ids_are_per_run_and_monotonic_from_one(store: ViewStore) -> None:
    feed = Feed()
    assert store.process(feed(running("r-a"), running("r-b"), published("r-a", "b1", 1, "x"))) == [
        "r-a", conversation_feed("conv-r-a"), "r-b", conversation_feed("conv-r-b")], "the runs, and their conversations' streams (D9)"
    assert [f.id for f in store.frames_after("r-a", 0)] == [1, 2]
    assert [f.id for f in store.frames_after("r-b", 0)] == [1]
    assert [f.id for f in store.frames_after("r-a", 1)] == [2]


@each_backend
@pytest.mark.rule("D1")
def test_a_redelivered_message_appends_no_frame(store: ViewStore) -> None:
    batch = Feed()(running(RUN), published(RUN, "b1", 1, "v1"))
    store.process(batch)
    before = held(store)
    assert store.process(batch) == []
    assert store.process(batch[1:]) == []
    assert held(store) == before
    assert store.position("imprint.publication.v1", 0) == 0
    assert store.position("imprint.runs.v1", 0) == 0


@each_backend
@pytest.mark.rule("D1")
def test_a_restart_keeps_frames_views_and_positions(settings: Settings) -> None:
    feed = Feed()
    first = ViewStore(settings)
    first.process(feed(running(RUN), published(RUN, "b1", 1, "v1")))
    frames, view = held(first), first.answer_view(RUN)
    first.close()
    again = ViewStore(settings)
    try:
        assert held(again) == frames and again.answer_view(RUN) == view
        assert again.process(feed(published(RUN, "b2", 1, "v2", ordinal=2))) == [RUN]
        assert [f.id for f in again.frames_after(RUN, len(frames))] == [len(frames) + 1]
    finally:
        again.close()


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("P21")
def test_a_new_client_replaying_from_zero_sees_only_current_bodies(store: ViewStore) -> None:
    store.process(Feed()(
        running(RUN),
        preview(RUN, "b1", 1, "draft one", candidate="c1"),
        published(RUN, "b1", 1, "draft one", candidate="c1"),
        published(RUN, "b2", 1, "private excerpt", ordinal=2),
        withdrawn(RUN, "b2", 1, "source_revoked", source_id="src-p"),
    ))
    frames = store.frames_after(RUN, 0)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1)), "every id is still there (no gap)"
    full = [f for f in frames if isinstance(f.data, dict) and "block" in f.data]
    shown = {f.data["block_id"]: f.data["block"] for f in full}
    assert shown["b1"]["status"] == "saved" and shown["b2"] is None
    assert "private excerpt" not in json.dumps([f.data for f in frames])
    assert [b["block_id"] for b in store.answer_view(RUN)["blocks"]] == ["b1"]  # type: ignore[index]


@each_backend
@pytest.mark.rule("D3")
def test_the_terminal_written_by_the_store_validates(store: ViewStore) -> None:
    store.process(Feed()(running(RUN), published(RUN, "b1", 1, "v1"), settled(RUN), closed(RUN, "y" * 30)))
    assert validate_stream(held(store)).ok
    assert store.run(RUN).terminal  # type: ignore[union-attr]


@each_backend
@pytest.mark.rule("D3")
@pytest.mark.rule("P21")
def test_a_withdrawal_after_done_strips_bodies_but_keeps_the_stream_valid(store: ViewStore) -> None:
    feed = Feed()
    store.process(feed(running(RUN), published(RUN, "b1", 1, "soon revoked"), settled(RUN), closed(RUN, "t")))
    count = len(held(store))
    # no frame for the run's stream (it is done); its conversation's notices hear it (D7), and its stream (D9)
    assert store.process(feed(withdrawn(RUN, "b1", 1))) == [notice_feed(f"conv-{RUN}"), conversation_feed(f"conv-{RUN}")]
    frames = held(store)
    assert len(frames) == count and validate_stream(frames).ok
    assert "soon revoked" not in json.dumps(frames)
    assert store.answer_view(RUN)["blocks"] == []  # type: ignore[index]


@each_backend
@pytest.mark.rule("X8")
def test_conversation_deletion_purges_private_bodies(store: ViewStore) -> None:
    feed = Feed()
    store.process(feed(running(RUN, conversation="conv-1"), published(RUN, "b1", 1, "secret body"),
                       settled(RUN), closed(RUN, "secret answer", conversation="conv-1"),
                       running("run-other", account="acct-2", conversation="conv-1")))
    store.process(feed(deleted(RUN, "conv-1")))
    record = store.run(RUN)
    assert record is not None and record.deleted
    assert store.answer_text(RUN) is None
    assert store.answer_view(RUN)["blocks"] == []  # type: ignore[index]
    blob = json.dumps(held(store))
    assert "secret" not in blob
    assert validate_stream(held(store)).ok, "ids and hashes survive the purge"
    assert not store.run("run-other").deleted, "another account's run in a same-named conversation is untouched"  # type: ignore[union-attr]


@each_backend
@pytest.mark.rule("D4")
@pytest.mark.rule("D5")
def test_delivery_state_is_sticky_once_completed(store: ViewStore) -> None:
    feed = Feed()
    store.process(feed(running(RUN)))
    assert store.run(RUN).delivery == "pending"  # type: ignore[union-attr]
    store.record_delivery(RUN, "interrupted")
    assert store.run(RUN).delivery == "interrupted"  # type: ignore[union-attr]
    store.record_delivery(RUN, "completed")
    store.record_delivery(RUN, "interrupted")
    assert store.run(RUN).delivery == "completed"  # type: ignore[union-attr]
    store.process(feed(running("run-2")))
    store.record_deliveries({RUN: "interrupted", "run-2": "interrupted"})
    assert store.run(RUN).delivery == "completed"  # type: ignore[union-attr]
    assert store.run("run-2").delivery == "interrupted"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        store.record_deliveries({"run-2": "received"})


@each_backend
@pytest.mark.rule("P17")
def test_conflicts_are_recorded_and_announced(store: ViewStore) -> None:
    seen = []
    store.listeners.append(seen.append)
    store.process(Feed()(published(RUN, "b1", 1, "A"), published(RUN, "b1", 1, "B")))
    rows = store.conflicts(RUN)
    assert len(rows) == 1 and rows[0]["block_id"] == "b1" and rows[0]["frame_id"] is not None
    assert len(seen) == 1
    assert store.answer_view(RUN)["conflicts"] == [{"block_id": "b1", "revision": 1}]  # type: ignore[index]


EARLIER_LAYOUT = (
    "CREATE TABLE delivery_runs (run_id TEXT PRIMARY KEY, account_id TEXT, conversation_id TEXT, state TEXT,"
    " outcome TEXT, last_frame_id BIGINT NOT NULL DEFAULT 0, terminal_frame_id BIGINT,"
    " delivery TEXT NOT NULL DEFAULT 'pending', deleted INTEGER NOT NULL DEFAULT 0, projection TEXT NOT NULL,"
    " first_seen TEXT NOT NULL, updated_at TEXT NOT NULL)",
    "CREATE TABLE delivery_views (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, view TEXT NOT NULL,"
    " updated_at TEXT NOT NULL)",
    "CREATE TABLE delivery_frames (run_id TEXT NOT NULL, frame_id BIGINT NOT NULL, event TEXT NOT NULL,"
    " data TEXT NOT NULL, body_sha256 TEXT NOT NULL, skey TEXT, superseded INTEGER NOT NULL DEFAULT 0,"
    " created_at TEXT NOT NULL, PRIMARY KEY (run_id, frame_id))",
    "CREATE TABLE delivery_conflicts (run_id TEXT NOT NULL, block_id TEXT NOT NULL, revision BIGINT NOT NULL,"
    " first_kind TEXT NOT NULL, first_sha256 TEXT NOT NULL, second_kind TEXT NOT NULL,"
    " second_sha256 TEXT NOT NULL, frame_id BIGINT, detected_at TEXT NOT NULL)",
)


@contextmanager
def earlier_store(settings: Settings) -> Iterator[Callable[[str, Sequence[Sequence[object]]], None]]:
    """Writes into the view store's tables on ``settings``'s backend the way the earlier store
    did, bypassing ``ViewStore`` (statements with ``?`` placeholders, one row of values each)."""
    if settings.database_url is None:  # the embedded default: the store's SQLite file
        path = settings.state_dir / "data"
        path.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path / "delivery.sqlite") as lite:
            yield lambda statement, rows: lite.executemany(statement, rows)
        lite.close()
        return
    schema = settings.database_schema
    assert schema is not None

    def named(statement: str) -> str:
        return statement.replace("delivery_", f'"{schema}".delivery_').replace("?", "%s")

    with psycopg.connect(settings.database_url) as pg, pg.cursor() as cursor:
        yield lambda statement, rows: cursor.executemany(named(statement), rows)


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("P17")
def test_a_store_in_the_earlier_layout_is_upgraded_in_place_and_continues(settings: Settings) -> None:
    from tests.component.delivery.test_delivery_store_append import Reference, script

    batches = script(4)
    reference, cut = Reference(), len(batches) // 2
    for batch in batches[:cut]:
        reference.batch(batch)
    run_id, p = reference.projection.run_id, reference.projection
    with earlier_store(settings) as write:  # what the earlier store wrote
        for statement in EARLIER_LAYOUT:
            write(statement, [()])
        write("INSERT INTO delivery_runs VALUES (?, ?, ?, ?, ?, ?, NULL, 'interrupted', 0, ?, 't0', 't0')",
              [(run_id, p.account_id, p.conversation_id, p.state, p.outcome, len(reference.frames),
                p.model_dump_json(exclude={"answer"}))])
        write("INSERT INTO delivery_views VALUES (?, ?, '{}', 't0')", [(run_id, p.answer.model_dump_json())])
        write("INSERT INTO delivery_frames VALUES (?, ?, ?, ?, ?, ?, ?, 't0')", [
            (run_id, f["id"], f["event"], json.dumps(f["data"], ensure_ascii=False), f["sha"], f["key"],
             int(f["superseded"])) for f in reference.frames])
        write("INSERT INTO delivery_conflicts VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)", [
            (run_id, x.block_id, x.revision, x.first_kind, x.first_sha256, x.second_kind, x.second_sha256,
             f"t{n:03d}") for n, x in enumerate(p.answer.conflicts)])
    store = ViewStore(settings)
    try:
        assert [(f.id, f.event, f.data) for f in store.frames_after(run_id, 0, 10_000)] == reference.held()
        assert store.run(run_id).delivery == "interrupted"  # type: ignore[union-attr]
        goes_on_like(store, reference, batches[cut:], Feed())
    finally:
        store.close()


def goes_on_like(store: ViewStore, reference: Any, batches: Sequence[Sequence[object]],
                 feed: Callable[..., list[Inbound]]) -> None:
    """``store`` applies ``batches`` and then holds the frames and shows the view the
    reference fold does."""
    for batch in batches:
        store.process(feed(*batch))
        reference.batch(batch)
    run_id, answer = reference.projection.run_id, reference.projection.answer
    assert [(f.id, f.event, f.data) for f in store.frames_after(run_id, 0, 10_000)] == reference.held()
    assert store.answer_view(run_id) == {
        "blocks": merge.view(answer),
        "conflicts": [{"block_id": c.block_id, "revision": c.revision} for c in answer.conflicts]}


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("P17")
def test_a_store_that_kept_display_entries_drops_them_and_shows_what_the_states_show(settings: Settings) -> None:
    """The store once kept each block's display entry beside its state; it is now derived
    from the state when ``/answer`` is read. A store written that way loses the column
    (whatever it held) and shows the same view, and the next batches go on."""
    from tests.component.delivery.test_delivery_store_append import Reference, script

    batches = script(4)
    reference, cut, feed = Reference(), len(batches) // 2, Feed()
    store = ViewStore(settings)
    for batch in batches[:cut]:
        store.process(feed(*batch))
        reference.batch(batch)
    run_id = reference.projection.run_id
    before = store.answer_view(run_id)
    store.close()
    with earlier_store(settings) as write:
        write("ALTER TABLE delivery_blocks ADD COLUMN display TEXT", [()])
        write("UPDATE delivery_blocks SET display = ?", [('{"stale": true}',)])
    store = ViewStore(settings)
    try:
        with store.tables.transaction(commit=False) as c:
            assert "display" not in store.views.columns(c, "blocks")
        assert store.answer_view(run_id) == before
        goes_on_like(store, reference, batches[cut:], feed)
    finally:
        store.close()


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
def test_a_run_held_in_memory_is_read_again_after_another_instance_wrote_it(settings: Settings) -> None:
    """Each instance keeps the runs it wrote in memory (the hot runs). When another instance
    writes one of them, the next batch sees the run row's new version and reads the run
    again: frame ids keep counting from the other instance's, and its revision is kept."""
    feed = Feed()
    first, second = ViewStore(settings), ViewStore(settings)
    try:
        first.process(feed(running(RUN), published(RUN, "b1", 1, "v1"), partition=0))
        assert len(first.hot) == 1
        second.process(feed(published(RUN, "b1", 2, "v2"), published(RUN, "b2", 1, "w1", ordinal=2), partition=1))
        first.process(feed(published(RUN, "b1", 3, "v3"), partition=0))
        assert [f.id for f in first.frames_after(RUN, 0)] == [1, 2, 3, 4, 5]
        shown = {b["block_id"]: (b["revision"], b["content"]["markdown"]) for b in first.answer_view(RUN)["blocks"]}
        assert shown == {"b1": (3, "v3"), "b2": (1, "w1")}
        # The other way round: the second instance's copy is now stale too.
        second.process(feed(published(RUN, "b2", 2, "w2", ordinal=2), partition=1))
        shown = {b["block_id"]: (b["revision"], b["content"]["markdown"]) for b in second.answer_view(RUN)["blocks"]}
        assert shown == {"b1": (3, "v3"), "b2": (2, "w2")}
        assert [f.id for f in second.frames_after(RUN, 0)] == [1, 2, 3, 4, 5, 6]
    finally:
        first.close()
        second.close()


@each_backend
@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
def test_a_run_held_in_memory_keeps_its_blocks_as_stored_and_goes_on_from_them(store: ViewStore) -> None:
    """A held run keeps each block as its stored row, not as parsed state (thousands of runs
    in flight must not cost the parsed models' memory), except a preview that awaits its
    commit. The next batch parses the blocks it names from there and goes on exactly as
    from the table."""
    feed = Feed()
    store.process(feed(running(RUN), preview(RUN, "b1", 1, "draft"), published(RUN, "b2", 1, "w1", ordinal=2)))
    (kept,) = store.hot._runs.values()
    assert set(kept.rows) == {"b1", "b2"}
    assert set(kept.projection.answer.blocks) == {"b1"}, "only the preview awaiting its commit stays parsed"
    store.process(feed(published(RUN, "b1", 1, "draft")))
    assert len(store.hot) == 1, "the run was taken from memory, not read again"
    store.process(feed(published(RUN, "b2", 2, "w2", ordinal=2)))
    shown = {b["block_id"]: (b["revision"], b["status"], b["content"]["markdown"])
             for b in store.answer_view(RUN)["blocks"]}
    assert shown == {"b1": (1, "saved", "draft"), "b2": (2, "saved", "w2")}
    assert [f.event for f in store.frames_after(RUN, 0)][-2:] == ["answer-publication", "answer-publication"]


@each_backend
@pytest.mark.rule("D1")
def test_a_failed_batch_leaves_no_copy_in_memory(store: ViewStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose transaction fails gives back none of the runs it changed: the next
    batch reads the stored rows, not the half-applied copy."""
    feed = Feed()
    store.process(feed(running(RUN), published(RUN, "b1", 1, "v1")))
    failing = feed(published(RUN, "b1", 2, "lost"))

    def refuse(*_: object) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(store.tables, "notify", refuse)
    with pytest.raises(RuntimeError):
        store.process(failing)
    monkeypatch.undo()
    assert len(store.hot) == 0
    store.process(failing)  # redelivered: applied once, on the stored rows
    assert [f.id for f in store.frames_after(RUN, 0)] == [1, 2, 3]
    shown = [(b["revision"], b["content"]["markdown"]) for b in store.answer_view(RUN)["blocks"]]
    assert shown == [(2, "lost")]


@each_backend
@pytest.mark.rule("D1")
def test_a_poll_whose_position_another_writer_recorded_meanwhile_fails_whole(store: ViewStore,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The positions are read once per poll and recorded in one statement at its end (on
    PostgreSQL in one pipelined transaction): a position that does not move forward there
    fails the whole poll, frames and rows included, and the poll is then known applied."""
    feed = Feed()
    store.process(feed(running(RUN), published(RUN, "b1", 1, "v1")))
    late = feed(published(RUN, "b1", 2, "v2"))
    store.process(late)
    before = held(store)
    stale = store.tables.read_positions

    def read_before_the_other_writer_committed(c: Any, names: Sequence[str]) -> dict[str, int | None]:
        return {name: None for name in stale(c, names)}

    monkeypatch.setattr(store.tables, "read_positions", read_before_the_other_writer_committed)
    assert store.process(late) == [], "refused by the recorded position: nothing applied, no run woken"
    monkeypatch.undo()
    assert held(store) == before
    assert len(store.hot) == 0


@each_backend
@pytest.mark.rule("D6")
def test_a_stream_ticket_names_its_account_for_its_run_only_until_it_expires(store: ViewStore) -> None:
    store.issue_ticket("digest-1", "acct-a", RUN, expires_at=1_000.0)
    assert store.use_ticket("digest-1", RUN, now=900.0, ttl=60.0) == "acct-a"
    assert store.use_ticket("digest-1", "another-run", now=900.0, ttl=60.0) is None
    assert store.use_ticket("digest-1", RUN, now=955.0, ttl=60.0) == "acct-a", "a use extends its life by the ttl"
    assert store.use_ticket("digest-1", RUN, now=1_016.0, ttl=60.0) is None, "expired a ttl after its last use"
    assert store.use_ticket("unknown", RUN, now=900.0, ttl=60.0) is None


@each_backend
@pytest.mark.parametrize("together_parameters", [1_000, 8])
def test_writes_sent_together_are_written_in_order_and_announced_at_the_commit(
        store: ViewStore, settings: Settings, together_parameters: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Tables.together``: statements numbered from ``$1`` each (``values``) and notifications,
    sent at the block's end in ``c``'s transaction — on PostgreSQL as one statement (as
    written, one by one, past ``TOGETHER_PARAMETERS``), its notifications heard only once the
    transaction commits."""
    monkeypatch.setattr("services.common.tables.TOGETHER_PARAMETERS", together_parameters)
    tables, views = store.tables, store.views
    listener = None
    if settings.database_url is not None:
        listener = psycopg.connect(settings.database_url, autocommit=True)
        listener.execute(f'LISTEN "{tables.channel}"')
        listener.execute("SELECT 1")  # its last query is not a LISTEN: the instances' LISTEN count stays theirs
    try:
        rows = [("r-t", "t1", 1), ("r-t", "t2", 2)]
        columns = ("run_id", "client_id", "last_event_id", "received_at")
        with tables.writing() as c:
            views.insert_rows(c, "{received}", columns, [("r-t", "t0", 0, "then")])
        with tables.writing() as c:
            with tables.together(c) as writes:
                views.insert_rows(writes, "{received}", columns, [(*row, "now") for row in rows])
                views.update_rows(writes, "{received}", ("last_event_id", "run_id", "client_id"),
                                  [(7, "r-t", "t0")], ("run_id", "client_id"))
                tables.notify(writes, "announced")
                assert len(writes.statements) == 2, "nothing sent before the block ends"
        with tables.reading() as c:
            c.execute(views.q("SELECT client_id, last_event_id FROM {received} WHERE run_id = ? ORDER BY client_id"),
                      ("r-t",))
            assert [(row["client_id"], int(row["last_event_id"])) for row in c.fetchall()] == [("t0", 7), ("t1", 1), ("t2", 2)]
        if listener is not None:
            heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
            assert heard == ["announced"], "the notification of the group, heard after the commit"
    finally:
        if listener is not None:
            listener.close()

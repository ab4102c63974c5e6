"""The client kit's cases, without a client (one process, no server): there are enough of them, each names a rule, and
the view each requires comes from Delivery's own projection of the run it plays — so a step
that withdraws a block requires a view without it, and one that ends the run requires ``done``."""

from __future__ import annotations

from pathlib import Path

import pytest

from imprint.contracts.publication import AnswerWithdrawn
from imprint.delivery.feeds import notice_feed
from services.conformance.client.cases import all_cases
from services.conformance.client.script import MemoryView, Messages, required_view
from imprint.delivery.summary import validate_stream
from services.common.inbound import Inbound
from services.common.settings import Settings
from services.delivery.view_store import ViewStore
from services.delivery.sse import frame_event

RULES = (Path(__file__).resolve().parents[3] / "docs" / "rules.md").read_text()


@pytest.mark.rule("D1")
def test_there_are_at_least_a_hundred_client_cases_each_naming_a_rule() -> None:
    cases = all_cases()
    assert len(cases) >= 100
    assert len({c.id for c in cases}) == len(cases)
    assert not [c.id for c in cases if f"### {c.rule} " not in RULES]


@pytest.mark.rule("P21")
@pytest.mark.rule("D3")
def test_the_required_view_is_delivery_s_projection_of_the_frames_served() -> None:
    for script in {c.script.name: c.script for c in all_cases()}.values():
        view = MemoryView("run-1", "conv-1")
        for step in script.build(Messages("run-1", "conv-1")):
            view.apply(step)
            required = required_view(view)
            for message in step:
                if isinstance(message, AnswerWithdrawn):  # P21: never shown again, before or after done
                    assert message.block_id not in [b[0] for b in required["blocks"]], script.name
        assert required["done"], f"{script.name} ends its run"
        frames = [(f.id, f.event, f.data) for f in view.frames]
        assert validate_stream(frames).ok, (script.name, validate_stream(frames).problems)  # D3: a valid terminal


@pytest.mark.rule("D1")
@pytest.mark.rule("D7")
def test_the_kit_serves_the_bytes_delivery_s_view_store_holds_after_every_step(tmp_path: Path) -> None:
    """The kit's in-memory store is no second opinion (SQLite here, as the store's own component
    tests; the same SQL runs on PostgreSQL in tests/integration/delivery): after every step of every script,
    Delivery's own view store (SQLite), fed the same polls, holds frames with the same ids and
    the same SSE bytes (skeletons included), and the same notices (but the time each was made)."""
    scripts = {c.script.name: c.script for c in all_cases()}
    store = ViewStore(Settings(state_dir=tmp_path / "state", database_url=None))
    offsets = {"imprint.publication.v1": 0, "imprint.runs.v1": 0}  # one log: a position is applied once
    try:
        for number, script in enumerate(scripts.values()):
            run_id, conversation_id = f"run-{number}", f"conv-{number}"
            kit = MemoryView(run_id, conversation_id)
            for index, step in enumerate(script.build(Messages(run_id, conversation_id)), 1):
                kit.apply(step)
                batch = []
                for message in step:
                    topic = "imprint.runs.v1" if message.type.startswith("run.") else "imprint.publication.v1"
                    batch.append(Inbound(topic, 0, offsets[topic], message))
                    offsets[topic] += 1
                store.process(batch)
                where = f"{script.name}, step {index}"
                assert [(f.id, f.event, frame_event(f)) for f in store.frames_after(run_id, 0)] == [
                    (f.id, f.event, frame_event(f)) for f in kit.frames], where
                record = store.run(run_id)
                assert record is not None and (record.last_frame_id, record.terminal) == (
                    kit.last_frame_id, kit.terminal), where
                held = store.notices.frames_after(notice_feed(conversation_id), 0)
                assert [(n.id, n.event, {**n.data, "at": None}) for n in held] == [
                    (n.id, n.event, {**n.data, "at": None}) for n in kit.notices], where
    finally:
        store.close()

"""The client kit's cases, without a client (one process, no server): there are enough of them, each names a rule, and
the view each requires comes from Delivery's own projection of the run it plays — so a step
that withdraws a block requires a view without it, and one that ends the run requires ``done``."""

from __future__ import annotations

from pathlib import Path

import pytest

from imprint.contracts.publication import AnswerWithdrawn
from services.conformance.client.cases import all_cases
from services.conformance.client.script import MemoryView, Messages, required_view
from imprint.delivery.summary import validate_stream

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

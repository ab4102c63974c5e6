"""The replay table is written line by line without rich when rich's layout is known
(issue 9: rendering 17,000 rows through rich took seconds); it must be exactly the table
rich draws, and fall back to rich whenever it might not be."""

from __future__ import annotations

import io
import random

import pytest
from rich.table import Table

from services.recovery import render


def drawn_by_rich(rows: list[dict]) -> str:
    out = io.StringIO()
    table = Table(title=render.REPLAY_TITLE, title_justify="left")
    for name, justify in render.REPLAY_COLUMNS:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(row["run_id"], str(row["blocks"]), str(row["withheld"]), render.short(row["sha256"], 16))
    render.console(out).print(table)
    return out.getvalue()


def written(rows: list[dict]) -> str:
    out = io.StringIO()
    render.replay_table(out, rows, None, None)
    return out.getvalue()


@pytest.mark.rule("R1")
def test_the_plain_replay_table_is_the_table_rich_draws() -> None:
    rng = random.Random(9)
    fast = 0
    for _ in range(200):
        rows = [{"run_id": "run-" + "x" * rng.randint(0, 130) + str(i),
                 "sha256": "%064x" % rng.getrandbits(256) if rng.random() < 0.9 else "short",
                 "blocks": rng.choice([0, 7, 50, 123456, 12345678]), "withheld": rng.choice([0, 3, 999999999])}
                for i in range(rng.randint(1, 25))]
        fast += render._plain_replay_table(io.StringIO(), rows)
        assert written(rows) == drawn_by_rich(rows)
    assert 20 < fast < 180  # both paths were taken: some tables were too wide for the fast one


@pytest.mark.rule("R1")
@pytest.mark.parametrize("run_id", ["r", "run-[bold]1[/bold]", "run-ünï", "run-日本", "run\\x", "run\t1"])
def test_cells_rich_would_read_differently_fall_back_to_rich(run_id: str) -> None:
    rows = [{"run_id": run_id, "sha256": "a" * 64, "blocks": 1, "withheld": 0},
            {"run_id": "run-2", "sha256": "b" * 64, "blocks": 2, "withheld": 1}]
    assert not render._plain_replay_table(io.StringIO(), rows)
    assert written(rows) == drawn_by_rich(rows)
    assert not render._plain_replay_table(io.StringIO(), [])

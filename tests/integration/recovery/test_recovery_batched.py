"""The whole-log replay reads a page of runs per query and may fold them in worker
processes (issue 9): it must give exactly what the run-by-run read gives (R1), and a
record that does not decode inside a page is still withheld alone (R4)."""

from __future__ import annotations

import json
from concurrent.futures.process import BrokenProcessPool

import pytest

from imprint.contracts.topics import Topic
from imprint.recovery import answer_view, view_hash
from services.common.settings import Settings
from services.publication.application import open_log
from services.recovery import cli, log_reader, replaying
from tests.integration.recovery.recovery_support import (
    ACCOUNT,
    PRIVATE_OWN,
    admitted,
    block_ids,
    feeding,
    granted,
    numeric,
    overwrite_state,
    part,
    registered,
    replay_lines,
    run_cli,
    text,
    views,
)
from tests.integration.recovery.test_recovery import damage_seal, version_of

pytestmark = pytest.mark.integration

RUNS = ("run-1", "run-2", "run-3", "run-4", "run-5")


def write_runs(settings: Settings) -> dict[str, dict[str, str]]:
    """Five runs of three committed blocks each, written interleaved in the same polls."""
    with feeding(settings) as (app, feed):
        feed(registered(), registered(PRIVATE_OWN, "private", ACCOUNT), topic=Topic.SOURCES)
        for step in range(3):
            messages = []
            for r in RUNS:
                messages += [(admitted(r), granted(r), granted(r, PRIVATE_OWN, "private", ACCOUNT), numeric(r, "12.5", 1)),
                             (part(r, "call-a", "A cites [[cite:src:public:annual-report-2024]]"),
                              part(r, "call-b", "B weighs [[num:num-weight]]")),
                             (text(r, f"C of {r}, from entry A"),)][step]
            feed(*messages)
        blocks = {}
        for r in RUNS:
            run = app.run(r)
            assert run is not None
            blocks[r] = {x.candidate_id: x.block_id for x in run.live_blocks()}
        return blocks


def per_run(settings: Settings) -> dict[str, object]:
    app = open_log(settings)
    try:
        return {r: log_reader.read_ledger(app, r) for r in RUNS}
    finally:
        app.close()


def batched(settings: Settings, run_ids: list[str]) -> list[object]:
    app = open_log(settings)
    try:
        return [ledger for ledger, _ in log_reader.iter_ledgers(app, run_ids)]
    finally:
        app.close()


@pytest.mark.rule("R1")
@pytest.mark.rule("R4")
def test_the_batched_read_gives_the_ledgers_of_the_run_by_run_read(isolated: Settings,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = write_runs(isolated)
    broken = version_of(isolated, "run-2", blocks["run-2"]["tool:call-b"])
    overwrite_state(isolated, "run-2", broken, b"\x00not json")
    damage_seal(isolated, "run-4", version_of(isolated, "run-4", blocks["run-4"]["text:turn-1:0"]))
    one_by_one = per_run(isolated)
    monkeypatch.setattr(log_reader, "RUNS_PER_READ", 2)  # pages of 2, 2 and 1 run(s)
    order = ["run-3", "run-1", "missing", "run-5", "run-2", "run-4"]
    got = batched(isolated, order)
    assert got == [one_by_one.get(r) for r in order]  # the same ledgers, in the order asked
    assert got[2] is None
    assert [view_hash(answer_view(ledger)) for ledger in got if ledger is not None] == [
        view_hash(answer_view(one_by_one[r])) for r in order if r != "missing"]  # type: ignore[arg-type]
    # the undecodable record of run-2 is its only defect; run-4's bad seal withholds one block
    assert [(d.reason, d.log_position) for d in got[4].defects] == [  # type: ignore[union-attr]
        ("undecodable_event", broken)]
    assert not got[5].defects  # type: ignore[union-attr]
    app = open_log(isolated)
    try:  # the notification log read whole (one page, every run in it) folds the same ledgers
        whole = log_reader.read_fold(app)
    finally:
        app.close()
    assert {r: whole.ledger(r) for r in RUNS} == one_by_one


@pytest.mark.rule("R4")
def test_an_undecodable_record_inside_a_page_is_withheld_alone(isolated: Settings) -> None:
    blocks = write_runs(isolated)
    code, before = replay_lines(isolated)
    assert code == 0
    b = blocks["run-3"]["tool:call-b"]
    overwrite_state(isolated, "run-3", version_of(isolated, "run-3", b), b"\x00not json")
    code, after = replay_lines(isolated)  # the whole log: every run in one page
    assert code == 0
    was, now = views(before), views(after)
    assert sorted(now) == list(RUNS)
    for r in RUNS:
        if r != "run-3":
            assert now[r] == was[r]  # the other runs of the page are untouched
    assert block_ids(now["run-3"]) == [blocks["run-3"]["tool:call-a"], blocks["run-3"]["text:turn-1:0"]]
    assert [w["reason"] for w in now["run-3"]["view"]["withheld"]] == ["undecodable_event"]
    code, checked = replay_lines(isolated, verify=True)
    assert code == 1 and checked[-1]["verify"]["failed_runs"] == ["run-3"]


@pytest.mark.rule("R1")
@pytest.mark.rule("X8")
def test_worker_processes_write_what_one_process_writes(isolated: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = write_runs(isolated)
    damage_seal(isolated, "run-2", version_of(isolated, "run-2", blocks["run-2"]["tool:call-a"]))
    monkeypatch.setattr(replaying, "RUNS_PER_READ", 2)  # three tasks over two workers
    for output in ("json", "table"):
        for bodies in (False, True):
            code, alone, _ = run_cli(cli.replay, isolated, output=output, bodies=bodies, workers=1)
            assert code == 0
            code, fanned, _ = run_cli(cli.replay, isolated, output=output, bodies=bodies, workers=2)
            assert code == 0
            assert fanned == alone
    code, out, _ = run_cli(cli.replay, isolated, workers=2)
    assert code == 0 and [view["run_id"] for view in map(json.loads, out.splitlines())] == list(RUNS)
    assert [(w["block_id"], w["reason"]) for w in views(
        [json.loads(line) for line in out.splitlines()])["run-2"]["view"]["withheld"]] == [
        (blocks["run-2"]["tool:call-a"], "seal_unopenable")]


@pytest.mark.rule("R1")
@pytest.mark.timeout(120)
def test_a_worker_that_cannot_open_the_log_fails_the_replay_instead_of_hanging(isolated: Settings) -> None:
    nowhere = isolated.model_copy(update={"database_url": "postgresql://imprint:imprint@127.0.0.1:9/imprint"})
    with pytest.raises(BrokenProcessPool):
        list(replaying.fanned_out(nowhere, list(RUNS), 2, "json", False))


@pytest.mark.rule("R1")
@pytest.mark.rule("R4")
def test_an_undecodable_opening_while_the_runs_are_streamed_to_workers(isolated: Settings,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers take pages of runs while the openings are still being read: a run whose
    opening cannot be decoded is left out of the listing there too, every other run is
    replayed as one process replays it, and ``--verify`` (which reads every opening
    first) names the opening it could not read."""
    write_runs(isolated)
    overwrite_state(isolated, "run-4", 1, b"\x00not json")
    monkeypatch.setattr(replaying, "RUNS_PER_READ", 2)
    monkeypatch.setattr(log_reader, "PAGE", 2)  # the openings are listed two at a time
    code, alone, _ = run_cli(cli.replay, isolated, workers=1)
    assert code == 0
    code, fanned, _ = run_cli(cli.replay, isolated, workers=2)
    assert code == 0 and fanned == alone
    assert [line["run_id"] for line in map(json.loads, fanned.splitlines())] == ["run-1", "run-2", "run-3", "run-5"]
    code, checked = replay_lines(isolated, verify=True)
    assert code == 1
    (failure,) = checked[-1]["verify"]["failures"]
    assert failure["reason"] == "undecodable_event" and failure["run_id"] == "?"

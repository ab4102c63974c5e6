"""Recovery tooling over a real Publication log in PostgreSQL (R1–R7, P15, P19, P21).

The log is written by ``PublicationLog.process`` from ``Inbound`` records, exactly as
the Publication consumer writes it; the commands then run as a later process would:
a fresh ``open_log`` over the same schema."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from imprint.contracts.sources import SourceRevoked
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.publication.application import open_log
from services.recovery import cli
from tests.integration.recovery.recovery_support import (
    damage_snapshot_block,
    ACCOUNT,
    OTHER,
    PRIVATE_OWN,
    PUBLIC,
    Feeder,
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
    snapshot_versions,
    stored_state,
    table_exists,
    text,
    views,
)
from tests.support.stack import environment

pytestmark = pytest.mark.integration


def write_run(settings: Settings, run_id: str = "run-1") -> dict[str, str]:
    """A run with three committed blocks (tool, tool with a number, entry-A text), in one
    consumer process that then exits. Nothing is emitted anywhere: no journal sees it."""
    with feeding(settings) as (app, feed):
        feed(registered(), registered(PRIVATE_OWN, "private", ACCOUNT), topic=Topic.SOURCES)
        feed(admitted(run_id), granted(run_id), granted(run_id, PRIVATE_OWN, "private", ACCOUNT),
             numeric(run_id, "12.5", 1))
        feed(part(run_id, "call-a", f"A cites [[cite:{PUBLIC}]]"),
             part(run_id, "call-b", "B weighs [[num:num-weight]]"),
             text(run_id, f"C, from entry A, cites [[cite:{PRIVATE_OWN}]]"))
        run = app.run(run_id)
        assert run is not None
        return {r.candidate_id: r.block_id for r in run.live_blocks()}


def version_of(settings: Settings, run_id: str, block_id: str) -> int:
    app = open_log(settings)
    try:
        run = app.run(run_id)
        assert run is not None
        return int(run.blocks[block_id]["receipt"]["log_position"])
    finally:
        app.close()


@pytest.mark.rule("R2")
@pytest.mark.rule("R5")
def test_a_block_no_journal_saw_is_in_the_answer_view_after_a_restart(isolated: Settings) -> None:
    blocks = write_run(isolated)
    assert not table_exists(isolated, "journal_events")  # no journal ever ran against this deployment
    code, lines = replay_lines(isolated, "run-1")  # a new process, reading the log alone
    assert code == 0
    (line,) = lines
    assert block_ids(line) == [blocks["tool:call-a"], blocks["tool:call-b"], blocks["text:turn-1:0"]]
    assert line["view"]["withheld"] == []

    code, out, _ = run_cli(cli.recover, isolated, "run-1", journaled={"run-1": set()})
    (report,) = json.loads(out)["runs"]
    assert code == 0 and report["committed_unjournaled"]["journal_consulted"] is True
    assert {b["block_id"] for b in report["committed_unjournaled"]["blocks"]} == set(blocks.values())


@pytest.mark.rule("R1")
def test_replay_verify_agrees_across_processes_and_with_snapshotted_aggregates(isolated: Settings) -> None:
    write_run(isolated)
    with feeding(isolated) as (app, feed):  # enough commits on one run for the repository to snapshot it (interval 100)
        feed(admitted("run-long"))
        feed(*(text("run-long", f"segment {i}", segment=i) for i in range(105)))
    snapshots = snapshot_versions(isolated, "run-long")  # the aggregate is rebuilt from a snapshot,
    assert len(snapshots) == 1 and 100 <= snapshots[0] <= 107  # taken from memory once 100 events were due
    first_code, first = replay_lines(isolated, verify=True)
    second_code, second = replay_lines(isolated)
    assert first_code == second_code == 0
    verdict = first[-1]["verify"]
    assert verdict["verified"] and verdict["replays_agree"] and verdict["aggregates_agree"] and verdict["runs"] == 2
    assert {r: v["sha256"] for r, v in views(first[:-1]).items()} == {r: v["sha256"] for r, v in views(second).items()}
    assert len(views(second)["run-long"]["view"]["blocks"]) == 105
    code, one = replay_lines(isolated, "run-1", verify=True)
    assert code == 0 and one[0]["sha256"] == views(second)["run-1"]["sha256"] and one[-1]["verify"]["verified"]


@pytest.mark.rule("R1")
def test_replay_verify_names_a_snapshot_that_disagrees_with_its_events(isolated: Settings) -> None:
    """The aggregate ``--verify`` compares with the fold is rebuilt from its snapshot: a
    snapshot whose block disagrees with the commit events fails the verification."""
    with feeding(isolated) as (app, feed):
        feed(admitted("run-long"))
        feed(*(text("run-long", f"segment {i}", segment=i) for i in range(105)))
    assert len(snapshot_versions(isolated, "run-long")) == 1
    block_id = damage_snapshot_block(isolated, "run-long", "body_sha256", "0" * 64)
    code, lines = replay_lines(isolated, verify=True)
    verdict = lines[-1]["verify"]
    assert code == 1 and not verdict["verified"] and not verdict["aggregates_agree"]
    assert verdict["aggregate_disagreements"] == [
        {"run_id": "run-long", "why": "block revisions differ", "blocks": [block_id]}]


def damage_body(settings: Settings, run_id: str, version: int, markdown: str) -> None:
    """Overwrite one commit's stored body (the sealed field) with other text, hash untouched."""
    state = stored_state(settings, run_id, version)
    assert set(state["block"]["content"]["markdown"]) == {"__sealed__", "__key__"}  # sealed at rest (X8)
    state["block"]["content"]["markdown"] = markdown
    overwrite_state(settings, run_id, version, json.dumps(state).encode())


def damage_seal(settings: Settings, run_id: str, version: int) -> None:
    """Flip one character of a commit's sealed body: the ciphertext no longer opens."""
    state = stored_state(settings, run_id, version)
    sealed = state["block"]["content"]["markdown"]["__sealed__"]
    state["block"]["content"]["markdown"]["__sealed__"] = sealed[:10] + ("A" if sealed[10] != "A" else "B") + sealed[11:]
    overwrite_state(settings, run_id, version, json.dumps(state).encode())


@pytest.mark.rule("R4")
@pytest.mark.rule("R1")
def test_replay_verify_names_each_damaged_block_and_fails_while_the_others_verify(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a, b, c = blocks["tool:call-a"], blocks["tool:call-b"], blocks["text:turn-1:0"]
    write_run(isolated, "run-2")  # an undamaged run beside it
    damage_body(isolated, "run-1", version_of(isolated, "run-1", b), "B weighs 99 %")  # hash no longer matches
    damage_seal(isolated, "run-1", version_of(isolated, "run-1", c))

    code, lines = replay_lines(isolated, verify=True)
    assert code == 1
    verdict = lines[-1]["verify"]
    assert verdict["verified"] is False and verdict["integrity_ok"] is False
    assert verdict["replays_agree"] and verdict["aggregates_agree"]  # deterministic, and still damaged
    assert {(f["run_id"], f["block_id"], f["revision"], f["reason"]) for f in verdict["failures"]} == {
        ("run-1", b, 1, "corrupt_body"), ("run-1", c, 1, "seal_unopenable")}
    assert verdict["failed_runs"] == ["run-1"]
    assert verdict["blocks"] == 6 and verdict["blocks_verified"] == 4 and verdict["seals_opened"] == 4  # b is no longer sealed
    per_run = views(lines[:-1])
    assert per_run["run-1"]["integrity"]["blocks_verified"] == 1 and per_run["run-2"]["integrity"]["ok"]
    assert block_ids(per_run["run-1"]) == [a]  # the damaged blocks are withheld alone (R4)
    assert [(w["block_id"], w["reason"]) for w in per_run["run-1"]["view"]["withheld"]] == [
        (b, "corrupt_body"), (c, "seal_unopenable")]
    assert "99 %" not in json.dumps(lines)
    assert all("markdown" not in blk["content"] for line in lines[:-1] for blk in line["view"]["blocks"])

    code, one = replay_lines(isolated, "run-2", verify=True)  # the undamaged run alone verifies
    assert code == 0 and one[-1]["verify"]["verified"]

    app = open_log(isolated)
    try:
        run = app.run("run-1")
        assert run is not None
        receipts = {k: run.blocks[k]["receipt"]["receipt_id"] for k in (a, b, c)}
        assert cli.read_block_from(app, "run-1", b, receipts[b], ACCOUNT).reason == "corrupt_body"
        assert cli.read_block_from(app, "run-1", c, receipts[c], ACCOUNT).reason == "seal_unopenable"
        assert cli.read_block_from(app, "run-1", a, receipts[a], ACCOUNT).served
    finally:
        app.close()
    code, out, _ = run_cli(cli.export, isolated, "run-1")
    exported = {x["block_id"]: x for x in json.loads(out)["blocks"]}
    assert exported[b]["revisions"][0]["integrity"] == "corrupt_body"


@pytest.mark.rule("R4")
def test_an_undecodable_row_fails_verification_and_recover_appends_nothing_to_that_run(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a, c = blocks["tool:call-a"], blocks["text:turn-1:0"]
    overwrite_state(isolated, "run-1", version_of(isolated, "run-1", c), b"\x00not json")
    code, lines = replay_lines(isolated, "run-1", verify=True)
    assert block_ids(lines[0]) == [a, blocks["tool:call-b"]]
    assert {w["reason"] for w in lines[0]["view"]["withheld"]} == {"undecodable_event"}
    verdict = lines[-1]["verify"]
    assert code == 1 and not verdict["aggregates_agree"]  # the run aggregate cannot be rebuilt
    assert [f["reason"] for f in verdict["failures"]] == ["undecodable_event"]
    code, out, _ = run_cli(cli.recover, isolated, "run-1", True, read_kafka=False)
    recovered = json.loads(out)
    assert code == 0 and recovered["applied"] and not any(x["appended"] for x in recovered["applied"])
    assert all(x["error"].startswith("run aggregate could not be rebuilt") for x in recovered["applied"])
    assert [d["reason"] for d in recovered["runs"][0]["defects"]] == ["undecodable_event"]


@pytest.mark.rule("R3")
@pytest.mark.rule("R6")
def test_the_protected_read_rechecks_account_and_sources_and_keeps_commit_time_numbers(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a, b, c = blocks["tool:call-a"], blocks["tool:call-b"], blocks["text:turn-1:0"]
    with feeding(isolated) as (app, feed):
        feed(numeric("run-1", "99.9", 2))  # today's value differs from the rendered one
        run = app.run("run-1")
        assert run is not None
        receipts = {k: run.blocks[k]["receipt"]["receipt_id"] for k in (a, b, c)}
        served = cli.read_block_from(app, "run-1", b, receipts[b], ACCOUNT)
        assert served.served and served.block is not None
        assert served.block["content"]["markdown"] == "B weighs 12.5 %"
        assert served.block["numbers"] == [{"handle_id": "num-weight", "rendered": "12.5 %", "version": 1}]
        assert cli.read_block_from(app, "run-1", c, receipts[c], OTHER).reason == "account_mismatch"
        assert cli.read_block_from(app, "run-1", c, receipts[b], ACCOUNT).reason == "receipt_mismatch"
        feed(SourceRevoked(source_id=PRIVATE_OWN, account_id=ACCOUNT, reason="owner withdrew it"), topic=Topic.SOURCES)
        assert cli.read_block_from(app, "run-1", c, receipts[c], ACCOUNT).reason == "withdrawn"
        assert cli.read_block_from(app, "run-1", a, receipts[a], ACCOUNT).served  # the others still are
    code, lines = replay_lines(isolated, "run-1")
    assert block_ids(lines[0]) == [a, b]
    assert "99.9" not in json.dumps(lines[0])


@pytest.mark.rule("P21")
def test_export_keeps_a_withdrawn_blocks_committed_history(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a = blocks["tool:call-a"]
    with feeding(isolated) as (app, feed):
        feed(part("run-1", "call-a2", f"A, second revision, cites [[cite:{PUBLIC}]]", replaces=a))
        feed(SourceRevoked(source_id=PUBLIC, reason="retracted"), topic=Topic.SOURCES)
    code, lines = replay_lines(isolated, "run-1")
    assert a not in block_ids(lines[0]) and blocks["tool:call-b"] not in block_ids(lines[0])  # B's number stood on it

    code, out, err = run_cli(cli.export, isolated, "run-1")
    assert code == 0, err
    export = json.loads(out)
    withdrawn = next(x for x in export["blocks"] if x["block_id"] == a)
    assert withdrawn["status"] == "withdrawn"
    assert withdrawn["withdrawn"]["cause"] == "source_revoked" and withdrawn["withdrawn"]["source_id"] == PUBLIC
    assert [r["revision"] for r in withdrawn["revisions"]] == [1, 2]
    assert withdrawn["revisions"][1]["block"]["content"]["markdown"].startswith("A, second revision")
    assert [e["type"] for e in export["trail"]].count("BlockWithdrawn") == 2
    assert run_cli(cli.export, isolated, "no-such-run")[0] == 2


@pytest.mark.rule("R7")
@pytest.mark.rule("P15")
@pytest.mark.rule("P19")
@pytest.mark.rule("P13")
def test_recover_reports_and_apply_appends_findings_once(isolated: Settings) -> None:
    blocks = write_run(isolated)
    a = blocks["tool:call-a"]
    with feeding(isolated) as (app, feed):

        # a previewed modification whose process died between the preview and the commit
        def crash(_: object) -> None:
            raise ConnectionError("process died after showing the preview")

        lost = feed.inbound(part("run-1", "call-lost", "A, previewed, never saved", replaces=a), Topic.RUNTIME)
        with pytest.raises(ConnectionError):
            feed.poll([lost], emit=crash)

        # a commit refused by the database (another writer moved the run): a failure fact
        other = open_log(isolated)

        def race(_: object) -> None:
            run = other.run("run-1")
            assert run is not None
            run.grant_evidence("src:public:late-grant", "public", "publisher")
            other.save(run)

        refused = feed.inbound(part("run-1", "call-refused", "D, refused once"), Topic.RUNTIME)
        with pytest.raises(Exception):
            feed.poll([refused], emit=race)
        other.close()

    code, out, _ = run_cli(cli.recover, isolated, "run-1")
    document = json.loads(out)
    (report,) = document["runs"]
    assert code == 0 and document["journal"]["availability"] == "absent"
    assert [p["candidate_id"] for p in report["previews_never_committed"]["previews"]] == ["tool:call-lost"]
    assert [(u["fact"], u["candidate_id"]) for u in report["save_unknowns"]["unresolved"]] == [
        ("save_failed", "tool:call-refused")]
    assert {e["tool_call_id"] for e in report["missing_tool_receipts"]["effects"]} == {"call-a", "call-b"}
    unjournaled = report["committed_unjournaled"]  # no journal ever ran here: it recorded none of them
    assert unjournaled["journal_consulted"] is True and len(unjournaled["blocks"]) == 3
    before = replay_lines(isolated, "run-1")[1][0]["sha256"]

    code, out, _ = run_cli(cli.recover, isolated, "run-1", True)
    applied = json.loads(out)
    assert code == 0 and sorted(x["kind"] for x in applied["applied"] if x["appended"]) == [
        *["committed_unjournaled"] * 3, "effect_confirmed", "effect_confirmed", "preview_not_committed",
        "save_not_committed"]
    (after,) = applied["runs"]
    assert len(after["reconciled"]) == 7
    assert run_cli(cli.recover, isolated, "run-1", True)[1].count('"appended": true') == 0  # idempotent
    assert replay_lines(isolated, "run-1")[1][0]["sha256"] == before  # nothing in the answer moved

    app = open_log(isolated)
    try:
        run = app.run("run-1")
        assert run is not None
        assert run.settled("tool:call-lost") is None  # never promoted
        assert run.blocks[a]["revision"] == 1
        feed = Feeder(app)
        feed.poll([lost, refused])  # the redelivered poll settles both for real
        run = app.run("run-1")
        assert run is not None and run.blocks[a]["revision"] == 2
        assert run.settled("tool:call-refused") is not None
    finally:
        app.close()
    (report,) = json.loads(run_cli(cli.recover, isolated, "run-1")[1])["runs"]
    assert report["previews_never_committed"]["previews"] == []
    assert [r["candidate_id"] for r in report["save_unknowns"]["resolved"]] == ["tool:call-refused"]
    assert report["save_unknowns"]["unresolved"] == []


@pytest.mark.rule("R1")
@pytest.mark.rule("R7")
@pytest.mark.rule("P21")
def test_the_imprint_console_script(isolated: Settings) -> None:
    blocks = write_run(isolated)
    script = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "imprint"
    if not script.exists():
        script = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "imprint"
    env = environment(isolated)

    def imprint(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=120,
                              cwd=str(isolated.state_dir.parent))

    replayed = imprint("replay", "--run", "run-1", "--verify", "--json")
    assert replayed.returncode == 0, replayed.stderr
    lines = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert block_ids(lines[0]) == list(blocks.values()) and lines[-1]["verify"]["verified"]
    assert lines[0]["sha256"] == replay_lines(isolated, "run-1")[1][0]["sha256"]  # same hash in-process

    recovered = imprint("recover", "--run", "run-1", "--apply", "--json")
    assert recovered.returncode == 0, recovered.stderr
    report = json.loads(recovered.stdout)
    assert report["apply"] is True
    assert {x["kind"] for x in report["applied"]} == {"effect_confirmed", "committed_unjournaled"}

    exported = imprint("export", "--run", "run-1")
    assert exported.returncode == 0, exported.stderr
    assert [x["block_id"] for x in json.loads(exported.stdout)["blocks"]] == list(blocks.values())
    assert imprint("export", "--run", "missing").returncode == 2
    assert imprint("replay", "--run", "missing").returncode == 2


@pytest.mark.rule("X8")
@pytest.mark.rule("R4")
def test_verify_counts_shredded_bodies_as_deleted_not_as_corruption(isolated: Settings) -> None:
    from services.common.backends import backend_for

    write_run(isolated)
    write_run(isolated, "run-2")
    keyring = backend_for(isolated).keyring()
    try:
        keyring.destroy("conv-run-1")  # the conversation was deleted: its bodies' key is gone
    finally:
        keyring.close()
    code, lines = replay_lines(isolated, verify=True)
    verdict = lines[-1]["verify"]
    assert code == 0 and verdict["verified"], verdict["failures"]
    assert verdict["shredded"] == 3 and verdict["seals_opened"] == 3
    per_run = views(lines[:-1])
    assert per_run["run-1"]["view"]["blocks"] == []
    assert {w["reason"] for w in per_run["run-1"]["view"]["withheld"]} == {"shredded"}
    assert len(per_run["run-2"]["view"]["blocks"]) == 3

"""The ``imprint`` console script as an operator meets it, over a real PostgreSQL log:
human tables by default, ``--json`` for machines, bodies only with ``--bodies``, and one
clear line (no traceback) for a missing run, a database that does not answer and a bad
flag (R1, R4, R7)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from services.common.settings import Settings
from tests.integration.delivery.support import free_port
from tests.integration.recovery.test_recovery import damage_body, version_of, write_run
from tests.support.stack import environment

pytestmark = pytest.mark.integration


def console(settings: Settings, *args: str, **env_changes: str) -> subprocess.CompletedProcess[str]:
    script = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "imprint"
    if not script.exists():
        script = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "imprint"
    env = {**environment(settings), **env_changes}
    env.pop("IMPRINT_DEBUG", None)
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(settings.state_dir.parent))


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("imprint")]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.rule("R4")
@pytest.mark.rule("R1")
def test_replay_verify_on_a_damaged_log_is_a_readable_failure(isolated: Settings) -> None:
    blocks = write_run(isolated)
    write_run(isolated, "run-2")
    b = blocks["tool:call-b"]
    damage_body(isolated, "run-1", version_of(isolated, "run-1", b), "B weighs 99 %")

    verified = console(isolated, "replay", "--verify")
    assert verified.returncode == 1
    table = verified.stdout
    assert "VERIFICATION FAILED in 1 run(s) (run-1)" in table and "5 of 6 blocks verify" in table
    assert b in table and "corrupt_body" in table and "run-2" in table
    assert "99 %" not in table and "B weighs" not in table  # no bodies unless asked
    assert one_line(verified.stderr).startswith(f"imprint: replay verification FAILED: run-1 {b}: corrupt_body")

    machine = console(isolated, "replay", "--verify", "--json")
    assert machine.returncode == 1
    verdict = json.loads(machine.stdout.splitlines()[-1])["verify"]
    assert [(f["run_id"], f["block_id"], f["reason"]) for f in verdict["failures"]] == [("run-1", b, "corrupt_body")]

    bodies = console(isolated, "replay", "--run", "run-2", "--bodies")
    assert bodies.returncode == 0 and "B weighs 12.5 %" in bodies.stdout


@pytest.mark.rule("R7")
def test_recover_and_inspect_print_tables_for_people(isolated: Settings) -> None:
    blocks = write_run(isolated)
    recovered = console(isolated, "recover", "--run", "run-1", "--no-kafka")
    assert recovered.returncode == 0, recovered.stderr
    assert "journal: absent" in recovered.stdout
    assert recovered.stdout.count("committed, not journaled") == 3
    assert "receipt missing" in recovered.stdout

    inspected = console(isolated, "inspect", "--run", "run-1")
    assert inspected.returncode == 0, inspected.stderr
    assert all(block_id[:13] in inspected.stdout for block_id in blocks.values())
    assert "committed, not journaled" in inspected.stdout and "3 disagreement(s)" in inspected.stdout
    document = json.loads(console(isolated, "inspect", "--run", "run-1", "--json").stdout)
    assert {d["kind"] for d in document["disagreements"]} == {"committed_not_journaled"}


@pytest.mark.rule("R1")
def test_errors_are_one_line_with_exit_codes(isolated: Settings) -> None:
    write_run(isolated)
    missing = console(isolated, "replay", "--run", "no-such-run")
    assert missing.returncode == 2 and one_line(missing.stderr) == \
        "imprint: run 'no-such-run' is not in the Publication log"
    assert console(isolated, "inspect", "--run", "no-such-run").returncode == 2
    assert console(isolated, "recover", "--run", "no-such-run", "--no-kafka").returncode == 2

    port = free_port()  # nothing listens there
    down = console(isolated, "replay", IMPRINT_DATABASE_URL=f"postgresql://imprint:secret@127.0.0.1:{port}/imprint")
    assert down.returncode == 1
    line = one_line(down.stderr)
    assert line.startswith(f"imprint: the database does not answer (postgresql://imprint@127.0.0.1:{port}/imprint)")
    assert "secret" not in down.stderr

    misconfigured = console(isolated, "replay", IMPRINT_DATABASE_SCHEMA="MySchema")
    assert misconfigured.returncode == 1 and one_line(misconfigured.stderr).startswith(
        "imprint: bad configuration: IMPRINT_DATABASE_SCHEMA: ")

    bad = console(isolated, "replay", "--frobnicate")
    assert bad.returncode == 2 and "unrecognized arguments: --frobnicate" in one_line(bad.stderr)
    for ttl in ("-5", "0"):
        refused = console(isolated, "token", "--account", "acct-1", "--ttl", ttl)
        assert refused.returncode == 2 and "must be a positive number of seconds" in one_line(refused.stderr)
        assert refused.stdout == ""
    minted = console(isolated, "token", "--account", "acct-1", "--ttl", "60")
    assert minted.returncode == 0 and minted.stdout.count(".") == 2


@pytest.mark.rule("R1")
def test_progress_goes_to_a_terminal_on_stderr_and_never_into_the_output(isolated: Settings) -> None:
    import pty

    write_run(isolated)
    write_run(isolated, "run-2")
    script = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "imprint"
    if not script.exists():
        script = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "imprint"
    primary, terminal = pty.openpty()
    try:
        done = subprocess.run([str(script), "replay", "--verify", "--json"], env=environment(isolated),
                              stdout=subprocess.PIPE, stderr=terminal, text=True, timeout=120,
                              cwd=str(isolated.state_dir.parent))
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(primary)
    assert done.returncode == 0
    assert b"replaying" in drawn and b"2/2" in drawn  # a bar over the runs, on the terminal
    assert all(json.loads(line) for line in done.stdout.splitlines())  # stdout stays machine-readable

"""The conformance kit's client cases (``imprint conformance client``) played over real HTTP
SSE to the two reference adapters — the reference page's own app.js under Node 20 (with
EventSource, and a subset through its fetch transport), and npm ``ai``'s DefaultChatTransport +
readUIMessageStream of every pinned line — each passing every case; a client that ignores
withdrawals, failing exactly the cases that withdraw; and a page that cannot count frames of a
kind it does not know, failing exactly the later-kind cases (R8)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imprint.contracts.publication import AnswerWithdrawn
from services.conformance.client import run_cases
from services.conformance.client.cases import all_cases
from services.conformance.client.script import Messages
from services.conformance.report import Report
from tests.node.conftest import HERE, LINES

pytestmark = [pytest.mark.timeout(240)]

ADAPTERS = HERE / "conformance"
RULES = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()


def node_for(line: str) -> str:
    node = LINES[line]
    if not (HERE / "node_modules" / "undici").exists() or (shutil.which(node) is None and not Path(node).exists()):
        raise RuntimeError("the Node client tier is not installed: run `make node-deps`")
    return node


def assert_every_case_passed(report: Report) -> None:
    assert len(report.cases) >= 100, report.counts()
    assert not [c for c in report.cases if f"### {c.rule} " not in RULES], "every case names a rule of docs/rules.md"
    assert report.passed, report.render(only_failures=True)
    expired = [c for c in report.cases if c.case.endswith("/ticket-expired")]
    assert expired and not [c.case for c in expired if ", 0 refused," in c.seen], "each expired ticket was refused"
    later = [c for c in report.cases if c.family == "later"]
    assert len(later) >= 16 and {c.rule for c in later} == {"R8"}, "the versioning policy's cases ran"


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D6")
@pytest.mark.rule("D7")
@pytest.mark.rule("D8")
@pytest.mark.rule("P16")
@pytest.mark.rule("P17")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
@pytest.mark.rule("R8")
def test_the_reference_page_client_passes_every_client_case() -> None:
    report = run_cases([node_for("ai5"), str(ADAPTERS / "reference_page.mjs")])
    assert_every_case_passed(report)


@pytest.mark.rule("D1")
@pytest.mark.rule("D7")
@pytest.mark.rule("D8")
@pytest.mark.rule("P17")
@pytest.mark.rule("P18")
@pytest.mark.rule("P21")
@pytest.mark.rule("R8")
def test_the_ai_sdk_mapping_read_by_read_ui_message_stream_passes_every_client_case() -> None:
    report = run_cases([node_for("ai6"), str(ADAPTERS / "ai_sdk.mjs"), "ai6"])
    assert_every_case_passed(report)


@pytest.mark.rule("D7")
@pytest.mark.rule("D8")
@pytest.mark.rule("P18")
@pytest.mark.rule("R8")
@pytest.mark.parametrize("line", sorted(set(LINES) - {"ai6"}))
def test_the_other_ai_sdk_lines_pass_the_live_reset_and_notices_cases(line: str) -> None:
    """ai 5.x and 7.x (on Node 22) through one path of every script, the resets, the notices and
    the later kinds (R8): the lines differ in their reader, not in what the kit varies between
    connections."""
    cases = [c for c in all_cases() if c.id.endswith("/live") or c.family in ("reset", "notices", "later")]
    report = run_cases([node_for(line), str(ADAPTERS / "ai_sdk.mjs"), line], cases=cases)
    assert report.passed and len(report.cases) == len(cases), report.render(only_failures=True)


@pytest.mark.rule("P18")
def test_imprint_conformance_client_runs_an_adapter_command_and_prints_the_report() -> None:
    imprint = Path(sys.executable).parent / "imprint"
    done = subprocess.run([str(imprint), "conformance", "client", "--only", "revision-in-place", "--",
                           node_for("ai5"), str(ADAPTERS / "ai_sdk.mjs"), "ai5"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "revision-in-place/resumed" in done.stdout and " passed, 0 failed" in done.stdout, done.stdout


def withdraws(case: object) -> bool:
    steps = case.script.build(Messages("run", "conv"))  # type: ignore[attr-defined]
    return any(isinstance(message, AnswerWithdrawn) for step in steps for message in step)


@pytest.mark.rule("P21")
@pytest.mark.rule("D7")
def test_the_kit_fails_a_client_that_ignores_withdrawals_on_the_cases_that_withdraw() -> None:
    cases = [c for c in all_cases() if withdraws(c) or c.family in ("single-block", "revision-in-place")]
    report = run_cases([node_for("ai5"), str(ADAPTERS / "reference_page.mjs"), "--ignore-withdrawals"], cases=cases)
    failed = {c.case for c in report.failures}
    withdrawing = {c.id for c in cases if withdraws(c)}
    assert failed <= withdrawing, f"only cases that withdraw fail: {sorted(failed - withdrawing)}"
    live = {case for case in withdrawing if case.endswith("/live") or case.startswith("notices/")}
    assert live <= failed, f"every withdrawal played live is caught: {sorted(live - failed)}"
    for case in report.failures:
        assert "required" in case.seen and "the client shows" in case.seen, case.seen
    assert {c.case for c in report.cases if c.family in ("single-block", "revision-in-place")} <= {
        c.case for c in report.cases if c.passed}


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("D8")
@pytest.mark.rule("R8")
def test_the_reference_page_read_with_fetch_passes_the_later_kind_reset_and_notices_cases() -> None:
    """The page's ``#transport=fetch`` path (its own SSE parser, resumed with ``Last-Event-ID``
    and a bearer: no tickets) where it differs from EventSource: frames of kinds it does not know,
    which it sees and holds itself (live and resumed), resets, and repeated notices."""
    cases = [c for c in all_cases() if c.family in ("later", "reset", "notices")]
    report = run_cases([node_for("ai5"), str(ADAPTERS / "reference_page.mjs"), "--fetch"], cases=cases)
    assert report.passed and len(report.cases) == len(cases), report.render(only_failures=True)


@pytest.mark.rule("R8")
@pytest.mark.rule("D3")
def test_the_kit_fails_a_page_that_cannot_count_the_frames_of_kinds_it_does_not_know() -> None:
    """EventSource never hands the page a kind it does not listen to: a page that cannot read
    those frames again cannot check the summary that counts them, and only the later-kind cases
    (whose runs carry such frames) fail, on the page's own D3 check."""
    cases = [c for c in all_cases() if c.family == "later" or c.family == "single-block"]
    report = run_cases([node_for("ai5"), str(ADAPTERS / "reference_page.mjs"), "--no-reread"], cases=cases)
    assert {c.case for c in report.failures} == {c.id for c in cases if c.family == "later"}, report.render()
    for case in report.failures:
        assert "verified: required True, the client shows False" in case.seen, case.seen


@pytest.mark.rule("R8")
def test_npm_ai_refuses_a_new_part_type_that_is_not_a_data_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why docs/protocol.md says a part type a later v1 server adds is a ``data-`` part: the same
    case with the new part typed otherwise is one npm ``ai``'s reader does not read past."""
    from services.conformance.client import runner, server

    made = server.later_part
    monkeypatch.setattr(server, "later_part", lambda frame: {**made(frame), "type": "added-in-a-later-v1"})
    monkeypatch.setattr(runner, "CATCH_UP_SECONDS", 3.0)  # it never catches up: no need to wait long
    cases = [c for c in all_cases() if c.id == "later/single-block/later-kinds"]
    report = run_cases([node_for("ai6"), str(ADAPTERS / "ai_sdk.mjs"), "ai6"], cases=cases)
    assert len(report.cases) == 1 and not report.passed, report.render()
    assert "step 1: the client handled" in report.cases[0].seen, report.cases[0].seen

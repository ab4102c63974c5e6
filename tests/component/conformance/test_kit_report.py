"""The kit's own pieces in one process: the report (table and JSON) both kits print, the SSE
reader's parsing, and the command's exits — 0 when every case passed, 1 when one failed, a
clean one-line refusal for a kit or family that does not exist."""

from __future__ import annotations

import io
import json

import pytest
import structlog

from services.cli import main
from services.conformance.report import Case, Report
from services.conformance.sse import Read, _line


@pytest.mark.rule("D10")
def test_the_report_names_each_case_its_rule_and_what_was_seen() -> None:
    report = Report(kit="server", target="http://deployment")
    report.add(Case(case="path/unbuffered/1", rule="D10", passed=False, family="path",
                    seen="frame 1 did not arrive within 5 s: nginx `proxy_buffering off;`"))
    report.add(Case(case="resume/header/3", rule="D1", passed=True, family="resume", seen="ids 4..9"))
    report.notes.append("runs made on Kafka")
    out = io.StringIO()
    report.print(out)
    table = out.getvalue()
    assert "path/unbuffered/1" in table and "FAIL" in table and "proxy_buffering off" in table
    assert "1/2 passed, 1 failed" in table and "note: runs made on Kafka" in table
    document = json.loads(report.to_json())
    assert document["ok"] is False and (document["total"], document["passed"], document["failed"]) == (2, 1, 1)
    assert [c["case"] for c in document["cases"]] == ["path/unbuffered/1", "resume/header/3"]
    assert report.by_family() == {"path": (0, 1), "resume": (1, 1)}
    assert not Report(kit="server").passed, "a report without cases proves nothing"


@pytest.mark.rule("D1")
def test_the_reader_parses_events_comments_and_retry_as_the_html_standard_does() -> None:
    read, pending = Read(url="u"), {"data": []}
    for line in ["retry: 2000", "", ": keep-alive", "id: 7", "event: progress", 'data: {"a":', "data: 1}", "",
                 "data: [DONE]", ""]:
        _line(read, pending, line, None)
    assert read.retry == 2000 and [c for _, c in read.comments] == ["keep-alive"]
    assert [(e.id, e.event, e.data) for e in read.events] == [(7, "progress", '{"a":\n1}'), (None, "message", "[DONE]")]
    assert read.events[0].json == {"a": 1}


@pytest.fixture
def logging_kept() -> object:
    """The command configures the process's logging (cached loggers included); the tests that
    run after it in this process capture logs with the configuration they started with."""
    kept = structlog.get_config()
    yield
    structlog.configure(**kept)


@pytest.mark.rule("D10")
@pytest.mark.usefixtures("logging_kept")
def test_the_command_refuses_what_it_does_not_know_in_one_line() -> None:
    with pytest.raises(SystemExit) as refused:
        main(["conformance", "server", "--url", "http://127.0.0.1:9", "--token", "x.y.z", "--run", "r",
              "--only", "nothing"])
    assert "no such family ['nothing']" in str(refused.value.code)
    with pytest.raises(SystemExit) as usage:
        main(["conformance", "client"])
    assert "give the adapter command after --" in str(usage.value.code)

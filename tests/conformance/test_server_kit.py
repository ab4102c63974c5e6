"""``imprint conformance server`` against the stack — directly, where every case passes, and
behind Debian's nginx: configured as a proxy that buffers (the path cases fail, each naming the
setting to change) and with the README's recommended configuration (they pass)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.cli import build_parser
from services.common.launcher import child_environment
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.conformance.conftest import KEEPALIVE, ORIGIN
from tests.support.nginx import BUFFERING, Nginx, recommended_locations
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240),
              pytest.mark.backends("postgres", reason="the kit reads a deployment over HTTP and Kafka; the store "
                                                      "behind Delivery is not what it checks (one stack, one backend)")]

ACCOUNT = "acct-conformance"
FRAME_WAIT = 15.0
"""How long a produced frame may take to reach the kit where it must (a loaded machine's stack);
behind the buffering proxy, where it never comes, the kit waits 1.5 s per frame."""
SHORT_READ_TIMEOUT = """
        proxy_pass http://delivery;
        proxy_buffering off;
        gzip off;
        proxy_read_timeout 400ms;
"""


def kit(settings: Settings, url: str, tmp_path: Path, *args: str, process: bool = False) -> tuple[int, dict[str, Any], str]:
    """The command as an operator runs it (``process``: as its own process; else in this one,
    through the same parser): its exit code, its JSON report, its printed table."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    argv = ["conformance", "server", "--url", url, "--token", mint_token(settings, ACCOUNT), "--keepalive",
            str(KEEPALIVE), "--topic-prefix", settings.topic_prefix, "--json", str(report), *args]
    if process:
        done = subprocess.run([sys.executable, "-m", "services.cli", *argv], env=child_environment(settings),
                              capture_output=True, text=True, timeout=200)
        code, out = done.returncode, done.stdout + done.stderr
    else:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            parsed = build_parser().parse_args(argv)
            code = parsed.func(parsed)
        out = printed.getvalue()
    assert report.exists(), f"no report (exit {code}):\n{out[-4000:]}"
    print(out)
    return code, json.loads(report.read_text()), out


def cases(report: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    return {c["case"]: c for c in report["cases"] if c["case"].startswith(prefix)}


def failed(report: dict[str, Any]) -> list[str]:
    return [f"{c['case']} [{c['rule']}]: {c['seen']}" for c in report["cases"] if not c["passed"]]


def finished_run(report: dict[str, Any]) -> str:
    """The finished run the kit made for ``report`` (its notes name it)."""
    found = re.search(r"(conf-[0-9a-f]+-finished)", " ".join(report["notes"]))
    assert found, report["notes"]
    return found.group(1)


@pytest.fixture(scope="module")
def direct(stack: Stack, module_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The whole kit against Delivery itself, once per module."""
    code, report, _ = kit(module_settings, stack.base_url, tmp_path_factory.mktemp("direct"),
                          "--kafka", module_settings.kafka_bootstrap, "--origin", ORIGIN, "--frame-wait", str(FRAME_WAIT),
                          process=True)
    report["exit"] = code
    return report


@pytest.mark.rule("D1")
@pytest.mark.rule("D2")
@pytest.mark.rule("D3")
@pytest.mark.rule("D4")
@pytest.mark.rule("D6")
@pytest.mark.rule("D7")
@pytest.mark.rule("D8")
@pytest.mark.rule("D10")
def test_every_server_case_passes_against_the_stack(direct: dict[str, Any]) -> None:
    assert failed(direct) == [], "\n".join(failed(direct))
    assert direct["exit"] == 0 and direct["ok"] is True
    assert direct["cases"] and len(direct["cases"]) >= 150, len(direct["cases"])
    families = {c["family"] for c in direct["cases"]}
    assert families >= {"sse", "frames", "resume", "reset", "end", "tickets", "isolation", "receipts", "ai-sdk",
                        "notices", "cors", "path", "cancel"}, families
    assert {c["case"] for c in direct["cases"]} >= {
        "tickets/expiry", "isolation/same-wait", "path/unbuffered/5", "path/keepalive/run", "cancel/ends-stopped",
        *(f"frames/{kind}/schema" for kind in ("progress", "run-status", "answer-preview", "answer-publication",
                                               "answer-withdrawn", "answer-rejected", "content", "evidence-summary",
                                               "stream-summary", "done"))}
    rules = {c["rule"] for c in direct["cases"]}
    assert rules >= {"D1", "D2", "D3", "D4", "D6", "D7", "D8", "D10"}


@pytest.mark.rule("D1")
@pytest.mark.rule("D8")
def test_without_kafka_the_kit_reads_the_finished_run_it_is_pointed_at(
    stack: Stack, module_settings: Settings, direct: dict[str, Any], tmp_path: Path,
) -> None:
    code, report, _ = kit(module_settings, stack.base_url, tmp_path, "--run", finished_run(direct),
                          "--only", "sse,frames,resume,reset,end,tickets,ai-sdk")
    assert failed(report) == [], "\n".join(failed(report))
    assert code == 0 and len(report["cases"]) >= 100


@pytest.mark.rule("D10")
def test_behind_a_buffering_proxy_the_path_cases_fail_naming_the_setting(
    stack: Stack, module_settings: Settings, tmp_path: Path,
) -> None:
    with Nginx(tmp_path / "nginx", f"127.0.0.1:{module_settings.http_port}", BUFFERING,
               keepalive_seconds=KEEPALIVE) as proxy:
        code, report, table = kit(module_settings, proxy.url, tmp_path, "--kafka", module_settings.kafka_bootstrap,
                                  "--only", "path", "--frame-wait", "1.5")
    assert code == 1 and report["ok"] is False
    path = cases(report, "path/")
    unbuffered = [c for name, c in path.items() if name.startswith("path/unbuffered/")]
    assert len(unbuffered) == 5 and not any(c["passed"] for c in unbuffered), unbuffered
    assert all("proxy_buffering off" in c["seen"] and "X-Accel-Buffering" in c["seen"] for c in unbuffered)
    compressed = [c for name, c in path.items() if name.startswith("path/no-compression/")]
    assert compressed and not any(c["passed"] for c in compressed)
    assert all("gzip off" in c["seen"] and "Content-Encoding gzip" in c["seen"] for c in compressed)
    keepalives = [c for name, c in path.items() if name.startswith("path/keepalive/")]
    assert keepalives and not any(c["passed"] for c in keepalives)
    assert all("proxy_buffering off" in c["seen"] for c in keepalives)
    assert all(c["passed"] for name, c in path.items() if name.startswith("path/last-event-id-intact/")), \
        "nginx passes Last-Event-ID through even when it buffers"
    assert "proxy_buffering off" in table and "FAIL" in table


@pytest.mark.rule("D10")
def test_a_read_timeout_shorter_than_the_keepalive_is_named(
    stack: Stack, module_settings: Settings, direct: dict[str, Any], tmp_path: Path,
) -> None:
    with Nginx(tmp_path / "nginx", f"127.0.0.1:{module_settings.http_port}", SHORT_READ_TIMEOUT,
               keepalive_seconds=KEEPALIVE) as proxy:
        code, report, _ = kit(module_settings, proxy.url, tmp_path, "--run", finished_run(direct), "--only", "path")
    keepalive = cases(report, "path/keepalive/")
    assert code == 1 and keepalive and not any(c["passed"] for c in keepalive.values())
    assert all("proxy_read_timeout" in c["seen"] for c in keepalive.values()), keepalive


@pytest.mark.rule("D10")
@pytest.mark.rule("D1")
@pytest.mark.rule("D8")
def test_with_the_readme_configuration_every_path_case_passes(
    stack: Stack, module_settings: Settings, tmp_path: Path,
) -> None:
    with Nginx(tmp_path / "nginx", f"127.0.0.1:{module_settings.http_port}", recommended_locations(),
               keepalive_seconds=KEEPALIVE) as proxy:
        code, report, _ = kit(module_settings, proxy.url, tmp_path, "--kafka", module_settings.kafka_bootstrap,
                              "--only", "resume,end,reset,cors,path,cancel", "--origin", ORIGIN,
                              "--frame-wait", str(FRAME_WAIT))
    assert failed(report) == [], "\n".join(failed(report))
    assert code == 0 and len(cases(report, "path/")) >= 10

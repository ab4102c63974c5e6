"""What ``make run`` shows a newcomer, in a real browser: ``imprint up --demo`` on the
embedded default (SQLite under the state folder, no ``IMPRINT_DATABASE_URL``), and the page
whose address it prints, opened in Chromium. The page shows both demo blocks, the first
one revised in place, and a stream that ended with a verified ``done``."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.backends import backend_for
from services.common.launcher import Launcher
from services.common.settings import Settings
from tests.conftest import several_partitions
from tests.support.kafka import create_topics
from tests.support.net import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

PRINTED_URL = re.compile(r"watch it in a browser: (\S+)")


@pytest.fixture
def embedded(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    """The settings ``make run`` gives ``imprint up``: no database URL, a state folder of its
    own; topics of the test's own on the real broker."""
    tag = uuid.uuid4().hex[:10]
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=None, database_schema=None,
                        state_dir=tmp_path / "state", topic_prefix=f"t{tag}.", group_prefix=f"imprint-{tag}",
                        http_host="127.0.0.1", http_port=free_port(), topic_partitions=several_partitions())
    assert backend_for(settings).name == "sqlite", "make run's default is the embedded store"
    create_topics(settings)
    yield settings


def printed_url(launcher: Launcher, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = PRINTED_URL.search(launcher.log("up"))
        if found:
            return found.group(1)
        if launcher.children["up"].returncode is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"imprint up --demo printed no page address:\n{launcher.tail('up')}")


@pytest.mark.rule("D1")
@pytest.mark.rule("D3")
@pytest.mark.rule("P18")
def test_make_runs_page_on_the_embedded_default_shows_the_demo_blocks_the_revision_and_done(
        embedded: Settings, chromium: Any, tmp_path: Path) -> None:
    launcher = Launcher(embedded)
    launcher.start_command("up", "services.cli", ["up", "--demo"])
    try:
        url = printed_url(launcher)
        chromium.goto(url)
        chromium.wait_for_selector("#integrity[data-state=ok]", timeout=60_000)
        blocks = chromium.eval_on_selector_all(
            "#blocks .block", "els => els.map(e => ({id: e.dataset.blockId, revision: e.dataset.revision,"
            " status: e.dataset.status, body: e.querySelector('.body').innerText}))")
        assert len(blocks) == 2, blocks
        first, second = blocks
        assert first["revision"] == "2" and "warmest year on record" in first["body"], "revised in place"
        assert second["revision"] == "1" and "field notes" in second["body"]
        assert chromium.inner_text("#status") == "complete"
        assert chromium.inner_text("#progress") == "", "no stage of a run that ended"
        assert "summary verified" in chromium.inner_text("#integrity")
        assert chromium.errors == []  # type: ignore[attr-defined]
        chromium.screenshot(path=str(tmp_path / "make-run.png"), full_page=True)
        assert (embedded.state_dir / "data" / "publication.sqlite").exists(), "the log is the embedded SQLite"
    finally:
        launcher.stop_all()

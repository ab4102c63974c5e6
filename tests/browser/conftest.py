"""Browser tier: the reference web client in Debian's Chromium (/usr/bin/chromium,
never a downloaded browser) driven by Playwright, against a real Delivery (uvicorn,
PostgreSQL, Kafka) fed through ``ViewStore.process()``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from services.common.settings import Settings
from tests.conftest import several_partitions
from tests.integration.delivery.support import Delivery, start_delivery

CHROMIUM = os.environ.get("IMPRINT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def topic_partitions() -> int:
    return several_partitions()


@pytest.fixture
def delivery(isolated: Settings) -> Iterator[Delivery]:
    yield from start_delivery(isolated.model_copy(update={"sse_keepalive_seconds": 1.0, "stream_open_wait_seconds": 1.0}))


@pytest.fixture
def chromium() -> Iterator[object]:
    """A fresh Chromium page per test. Playwright's sync API keeps an event loop on this
    thread, so it starts after the fixtures that use ``asyncio.run`` (topics), and
    tests read Kafka through ``support.off_thread``."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (never download a browser)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.errors = errors  # type: ignore[attr-defined]
            yield page
        finally:
            browser.close()


@pytest.fixture
def page(delivery: Delivery, chromium: object) -> object:
    """A Chromium page beside a running Delivery (the ``delivery`` fixture)."""
    return chromium

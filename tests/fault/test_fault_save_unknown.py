"""P15 save-unknown, for real: the ``publication`` process talks to PostgreSQL through a
TCP proxy that cuts the connection right around the COMMIT of the tracked transaction
(and cuts the store's own retries, so they cannot find out either). The relay talks to PostgreSQL directly.

* COMMIT executed, reply withheld → ``answer.save_unknown``, then the read-back finds the
  candidate committed: it is relayed once, never re-applied.
* COMMIT never reached the server → ``answer.save_unknown``, then the read-back finds
  nothing: the poll is retried and commits once. Never assumed either way."""

from __future__ import annotations

import time

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse

import pytest

from services.common.settings import Settings
from tests.fault.pgproxy import PgProxy
from tests.integration.publication.pubsupport import (
    admitted,
    dedupe,
    has_published,
    of_type,
    part,
    published,
    run_events,
    send,
    wait_run,
)
from tests.support.stack import Stack

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120),
              pytest.mark.backends("postgres", reason="a wire proxy in front of the database server")]


@contextmanager
def proxied(settings: Settings) -> Iterator[tuple[PgProxy, Settings]]:
    assert settings.database_url
    url = urlparse(settings.database_url)
    proxy = PgProxy(url.hostname or "127.0.0.1", url.port or 5432)
    port = proxy.start()
    netloc = url.netloc.rsplit("@", 1)
    through = urlunparse(url._replace(netloc=f"{netloc[0]}@127.0.0.1:{port}" if len(netloc) == 2 else f"127.0.0.1:{port}"))
    try:
        yield proxy, settings.model_copy(update={"database_url": through})
    finally:
        proxy.close()


@contextmanager
def warmed_up_through_proxy(settings: Settings, run: str) -> Iterator[tuple[PgProxy, Stack]]:
    """The relay, and Publication reaching PostgreSQL through a proxy, with ``run``'s first
    block already published; stopped afterwards. The relay is a process of its own here
    (``publication_relay=separate``): the proxy's faults are the consumer's alone."""
    settings = settings.model_copy(update={"publication_relay": "separate"})
    stack = Stack(settings, parts=())
    with proxied(settings) as (proxy, through_proxy):
        try:
            stack.start("relay")
            stack.start("publication", settings=through_proxy)
            send(settings, admitted(run), part(run, "warm", "Warm-up."))
            wait_run(settings, run, has_published("Warm-up."), timeout=45)
            yield proxy, stack
        finally:
            stack.__exit__(None, None, None)


@pytest.mark.rule("P15")
@pytest.mark.rule("P19")
@pytest.mark.parametrize("mode", ["after_commit", "before_commit"])
def test_a_commit_whose_outcome_is_unknown_is_resolved_by_reading_back(isolated: Settings, mode: str) -> None:
    s, run = isolated, f"run-unknown-{mode}"
    with warmed_up_through_proxy(s, run) as (proxy, stack):
        # the tracked transaction's COMMIT; then the store's 9 retries are cut too (10 attempts in all)
        proxy.arm(mode, then_refuse=9, watch="publication_tracking")
        send(s, part(run, "u-1", "Saved or not?"))
        # (after a durable COMMIT the relay may announce it before the consumer, still busy
        # with its cut retries, says save_unknown: wait for both)
        values = wait_run(s, run, lambda vs: has_published("Saved or not?")(vs) and any(
            v["type"] == "answer.save_unknown" for v in vs), timeout=45)
        publication_log = stack.log("publication")

    assert not proxy.armed, "every armed fault was used"
    expected_first = ("server replied COMMIT; reply withheld, connection cut" if mode == "after_commit"
                      else "commit dropped before the server saw it")
    assert proxy.log.events == [expected_first] + ["attempt refused"] * 9
    unknown = [v for v in of_type(values, "answer.save_unknown") if v["candidate_id"] == "tool:u-1"]
    assert unknown, "the unconfirmed commit was announced as unknown"
    kinds = [v["type"] for v in values if v.get("candidate_id") == "tool:u-1"
             or v.get("block", {}).get("candidate_id") == "tool:u-1"]
    assert kinds.index("answer.preview") < kinds.index("answer.save_unknown"), "preview, then save_unknown"
    mine = [v for v in dedupe(published(values)) if v["block"]["candidate_id"] == "tool:u-1"]
    assert [v["block"]["revision"] for v in mine] == [1], "exactly one committed revision, relayed once"
    commits = [e for e in run_events(s, run)
               if type(e).__name__ == "BlockRevisionCommitted" and e.candidate_id == "tool:u-1"]
    assert len(commits) == 1
    assert "commit outcome unknown; reading back" in publication_log
    if mode == "after_commit":  # the read-back found it: nothing re-applied
        assert "batch failed" not in publication_log
    else:  # the read-back found nothing: the poll was retried, not dead-lettered, not assumed
        assert "batch failed; rewinding for redelivery" in publication_log
        assert "dead-lettering" not in publication_log


@pytest.mark.rule("P15")
def test_a_connection_lost_while_reading_a_key_is_retried_not_dead_lettered(isolated: Settings) -> None:
    s, run = isolated, "run-unknown-key"
    with warmed_up_through_proxy(s, run) as (proxy, stack):
        proxy.cut_statements("data_key", times=1)
        time.sleep(1.5)  # past the one-second key cache (keys.RecentKeys): the key is read from the table
        send(s, part(run, "k-1", "Needs the conversation key."), part(run, "k-2", "Marker behind it."))
        values = wait_run(s, run, has_published("Marker behind it."), timeout=20)
        publication_log = stack.log("publication")
    assert proxy.log.events == ["attempt refused"]
    assert [v["block"]["revision"] for v in dedupe(published(values)) if v["block"]["candidate_id"] == "tool:k-1"] == [1]
    assert "dead-lettering" not in publication_log

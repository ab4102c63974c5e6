"""The advisory lock that elects the one active relay of a log (issue 12.3), on the real
PostgreSQL: one holder per log and schema, a lost session frees it, and a relay whose
session is gone knows it is no longer elected."""

from __future__ import annotations

import threading

import psycopg
import pytest

from services.common.backends import backend_for
from services.common.election import AdvisoryLockElection, lock_id
from services.common.settings import Settings

pytestmark = [pytest.mark.integration,
              pytest.mark.backends("postgres", reason="the advisory-lock election (the file lock has its own test)")]


def stop_after(seconds: float) -> threading.Event:
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    return stop


@pytest.mark.rule("P14")
def test_one_relay_holds_the_advisory_lock_and_a_lost_session_frees_it(isolated: Settings) -> None:
    assert isolated.database_url is not None
    active = backend_for(isolated).election("relay→imprint.publication.v1")
    standby = backend_for(isolated).election("relay→imprint.publication.v1")
    other_log = backend_for(isolated).election("relay→imprint.runs.v1")
    assert isinstance(active, AdvisoryLockElection) and isinstance(standby, AdvisoryLockElection)
    assert active.key == lock_id(isolated.database_schema or "", "relay→imprint.publication.v1") != lock_id(
        "another_schema", "relay→imprint.publication.v1"), "one lock per log and schema"
    try:
        assert active.campaign(threading.Event()) and active.still_leading()
        assert standby.campaign(stop_after(0.6)) is False, "exactly one active relay per log"
        assert other_log.campaign(threading.Event()), "the other log's relay is elected on its own"

        # The active relay's session ends (as when its process is killed): the lock is free.
        with psycopg.connect(isolated.database_url, autocommit=True) as admin:
            pids = [row[0] for row in admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                "objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s",
                (active.key,)).fetchall()]
            assert len(pids) == 1
            admin.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        assert not active.still_leading(), "a relay whose lock session is gone knows it"
        assert standby.campaign(stop_after(10)) is True and standby.still_leading()
    finally:
        for election in (active, standby, other_log):
            election.resign()

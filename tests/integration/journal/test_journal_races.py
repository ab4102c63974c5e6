"""Races between two journal processes on one store, on each backend: admission vs deletion (X8), tombstone vs completion (X7)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from journal_helpers import ACCOUNT, Feeder, admitted, completed, delete_requested, granted, to_running, tombstoned

from services.journal.queries import JournalQueries

pytestmark = pytest.mark.integration

ROUNDS = 60


@pytest.fixture
def rivals(open_journal):
    """Two journal processes on one store, each with its feeder: ``a, fa, b, fb``."""
    a, b = open_journal(), open_journal()
    return a, Feeder(a), b, Feeder(b)


def _race(first, second, delay_second: float = 0.0) -> None:
    """Start both at a barrier; ``delay_second`` shifts the second so both orders occur."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(fn, delay):
        try:
            barrier.wait()
            if delay:
                time.sleep(delay)
            fn()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn, d)) for fn, d in ((first, 0.0), (second, delay_second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


@pytest.mark.rule("X8")
def test_deletion_racing_admission_is_never_half_deleted(rivals, sql_rows) -> None:
    a, fa, b, fb = rivals
    outcomes = {"admitted_then_erased": 0, "refused": 0}
    for i in range(ROUNDS):
        cid, run = f"race-{i}", f"r{i}"
        # an earlier, already admitted turn: deletion must erase it too
        fa(admitted(f"{run}-0", conversation_id=cid, message_id=f"m{i}-0", question=f"Ptarmigan earlier question {i}"))
        adm = fa.wrap(admitted(run, conversation_id=cid, message_id=f"m{i}", question=f"Ptarmigan racing question {i}"))
        dele = fb.wrap(delete_requested(cid))
        _race(lambda: a.process(adm), lambda: b.process(dele), delay_second=random.uniform(0, 0.012))
        conv, ex, earlier = a.conversation(cid), a.execution(run), a.execution(f"{run}-0")
        assert conv.deleted and a.keyring.is_destroyed(cid)
        assert earlier.erased
        if ex.admitted:
            # admitted first: bound to the conversation and erased by the deletion
            assert ex.erased and run in conv.run_ids
            outcomes["admitted_then_erased"] += 1
        else:
            # deleted first: refused, never bound
            assert [r.code for r in ex.refusals] == ["conversation_deleted"] and run not in conv.run_ids
            outcomes["refused"] += 1
        # never half-deleted: every bound run is erased, every erased run is bound
        for bound in conv.run_ids:
            assert a.execution(bound).erased
        assert a.message_index.lookup(cid, f"m{i}") is None
        assert JournalQueries(a).history(cid, ACCOUNT).deleted
    print("admission/deletion race outcomes:", outcomes, "conflict retries:", a.conflicts + b.conflicts)
    assert sum(outcomes.values()) == ROUNDS
    assert "Ptarmigan" not in sql_rows()


@pytest.mark.rule("X7")
@pytest.mark.parametrize("linked_at_grant", [True, False], ids=["granted-first", "cited-only-at-completion"])
def test_tombstone_racing_completion_always_ends_redacted(rivals, linked_at_grant) -> None:
    a, fa, b, fb = rivals
    orders = {"tombstone_saw_link": 0, "completion_saw_tombstone": 0}
    for i in range(ROUNDS):
        run, src = f"g{i}", f"src-race-{i}"
        fa(*to_running(run, message_id=f"m{i}"), *([granted(run, src)] if linked_at_grant else []))
        done = fa.wrap(completed(run, sources=(src, "src-keep")))
        tomb = fb.wrap(tombstoned(src))
        _race(lambda: a.process(done), lambda: b.process(tomb), delay_second=random.uniform(0, 0.01))
        ex = a.execution(run)
        assert ex.record is not None and ex.record.source_ids == [src, "src-keep"]
        assert src in ex.redacted_sources, f"round {i}: completion escaped the tombstone"
        assert "src-keep" not in ex.redacted_sources
        names = [type(e).__name__ for e in a.events.get(ex.id)]
        closed_at = names.index("Closed")
        redacted_at = names.index("EvidenceRedacted")
        orders["completion_saw_tombstone" if redacted_at < closed_at else "tombstone_saw_link"] += 1
        view = JournalQueries(a).execution(run, ACCOUNT, "completed")
        assert [(e.source_id, e.redacted) for e in view.evidence] == [(src, True), ("src-keep", False)]
    print("tombstone/completion race orders:", orders, "conflict retries:", a.conflicts + b.conflicts)


@pytest.mark.rule("X2")
def test_processes_opening_the_same_fresh_store_at_once(journal_settings) -> None:
    """Several journal processes starting together race to create the tables, key and index tables."""
    from services.journal.application import RuntimeJournal

    opened: list[RuntimeJournal] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait()
        opened.append(RuntimeJournal.from_settings(journal_settings))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert len(opened) == 4
        Feeder(opened[0])(admitted("r1"))
        assert all(j.execution("r1").admitted for j in opened)
    finally:
        for j in opened:
            j.close()

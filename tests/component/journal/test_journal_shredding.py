"""X8 — deletion and retention by crypto-shredding, coordinated with admission."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from journal_helpers import ACCOUNT, ANSWER, OTHER, QUESTION, admitted, completed, delete_requested, stored_payloads, to_running

from imprint.contracts.runtime import RunStage
from imprint.shredding import FieldSealer, KeyDestroyed, Shredded, Unreadable
from imprint.shredding import InMemoryKeyring
from services.common.backends import backend_for
from services.common.settings import Settings
from services.journal.application import RuntimeJournal


# -- the sealer ---------------------------------------------------------------------------------


@pytest.mark.rule("X8")
def test_seal_open_roundtrip_and_associated_data_binding() -> None:
    sealer = FieldSealer(InMemoryKeyring())
    sealed = sealer.seal("c1", "r1", "request.question", "secret question")
    assert sealed.startswith("esv1.") and "secret" not in sealed
    assert sealer.open("c1", "r1", "request.question", sealed) == "secret question"
    # moved to another run, field or conversation: does not open
    assert isinstance(sealer.open("c1", "r2", "request.question", sealed), Unreadable)
    assert isinstance(sealer.open("c1", "r1", "completion.answer_text", sealed), Unreadable)
    sealer.keyring.key_for("c2", create=True)
    assert isinstance(sealer.open("c2", "r1", "request.question", sealed), Unreadable)
    assert isinstance(sealer.open("c1", "r1", "request.question", "plaintext, not sealed"), Unreadable)
    assert sealer.open("c1", "r1", "x", None) is None


@pytest.mark.rule("X8")
def test_after_destruction_reads_yield_a_shredded_marker_never_an_exception() -> None:
    keyring = InMemoryKeyring()
    sealer = FieldSealer(keyring)
    sealed = sealer.seal("c1", "r1", "f", "body")
    keyring.destroy("c1")
    value = sealer.open("c1", "r1", "f", sealed)
    assert isinstance(value, Shredded) and not value
    with pytest.raises(KeyDestroyed):
        sealer.seal("c1", "r1", "f", "new body")
    with pytest.raises(KeyDestroyed):
        keyring.key_for("c1", create=True)


@pytest.mark.rule("X8")
def test_fingerprint_is_keyed_and_dies_with_the_key() -> None:
    keyring = InMemoryKeyring()
    sealer = FieldSealer(keyring)
    a = sealer.fingerprint("c1", "r1", "f", "text")
    assert a == sealer.fingerprint("c1", "r1", "f", "text") != sealer.fingerprint("c1", "r1", "f", "text2")
    assert FieldSealer(InMemoryKeyring()).fingerprint("c1", "r1", "f", "text") != a  # another key, another MAC
    keyring.destroy("c1")
    with pytest.raises(KeyDestroyed):
        sealer.fingerprint("c1", "r1", "f", "text")


# -- deletion through the journal ---------------------------------------------------------------


def _conversation(feed) -> None:
    feed(*to_running("r1", message_id="m1"), RunStage(run_id="r1", stage="search", detail="searching the Nordwind filings"), completed("r1"))
    feed(*to_running("r2", message_id="m2"))


@pytest.mark.rule("X8")
def test_delete_removes_every_private_body_from_projections(feed, journal, queries, keyring) -> None:
    _conversation(feed)
    assert queries.execution("r1", ACCOUNT, "completed").answer_text == ANSWER
    feed(delete_requested())
    assert keyring.is_destroyed("conv-1")
    conv = journal.conversation("conv-1")
    assert conv.deleted and conv.deletion_reason == "user"
    for run in ("r1", "r2"):
        ex = journal.execution(run)
        assert ex.erased
        view = queries.execution(run, ACCOUNT, "completed")
        assert view.display == "deleted" and view.deleted
        assert view.question is None and view.answer_text is None and view.evidence == [] and view.conditions is None
    history = queries.history("conv-1", ACCOUNT)
    assert history.deleted and history.items == []
    assert journal.message_index.lookup("conv-1", "m1") is None


@pytest.mark.rule("X8")
def test_private_bodies_never_appear_in_the_log_and_announcements_go_dark(feed, journal, keyring) -> None:
    _conversation(feed)
    raw = stored_payloads(journal)
    for private in (QUESTION.encode(), ANSWER.encode(), b"Nordwind filings", b"secret-cond", b"annual report", b"Title of src-a"):
        assert private not in raw
    feed(delete_requested())
    announced = [m for _, m in journal.announcements(limit=1000) if m is not None]
    closed = [m for m in announced if m.type == "run.closed"]
    progress = [m for m in announced if m.type == "run.progress"]
    assert closed and all(m.answer_text is None for m in closed)  # re-announcing after deletion reveals nothing
    assert progress and all(m.detail == "" for m in progress)
    deleted = [m for m in announced if m.type == "conversation.deleted"]
    assert sorted(m.run_id for m in deleted) == ["r1", "r2"]


@pytest.mark.rule("X8")
def test_admission_after_deletion_is_refused(feed, journal, keyring) -> None:
    feed(admitted("r1"))
    feed(delete_requested())
    feed(admitted("r3", message_id="m3"))
    ex = journal.execution("r3")
    assert not ex.admitted and [r.code for r in ex.refusals] == ["conversation_deleted"]
    assert "r3" not in journal.conversation("conv-1").run_ids


@pytest.mark.rule("X8")
def test_deleting_a_never_seen_conversation_blocks_its_future_admissions(feed, journal, keyring) -> None:
    feed(delete_requested("conv-new"))
    feed(admitted("r1", conversation_id="conv-new"))
    assert [r.code for r in journal.execution("r1").refusals] == ["conversation_deleted"]


@pytest.mark.rule("X8")
def test_late_runtime_messages_of_a_deleted_conversation_are_refused(feed, journal) -> None:
    feed(*to_running("r1"))
    feed(delete_requested())
    feed(completed("r1"), RunStage(run_id="r1", stage="late", detail="late private detail"))
    ex = journal.execution("r1")
    assert ex.record is None
    assert [r.code for r in ex.refusals] == ["execution_erased", "execution_erased"]
    assert b"late private detail" not in stored_payloads(journal)


@pytest.mark.rule("X8")
def test_deletion_by_another_account_is_refused_and_recorded(feed, journal, keyring) -> None:
    feed(admitted("r1"))
    feed(delete_requested(account_id=OTHER))
    assert not keyring.is_destroyed("conv-1")
    conv = journal.conversation("conv-1")
    assert not conv.deleted and conv.refusals == [("conversation.delete_requested", "account_mismatch")]


@pytest.mark.rule("X8")
def test_deletion_is_idempotent(feed, journal) -> None:
    feed(*to_running("r1"))
    request = delete_requested()
    feed(request)
    version = journal.conversation("conv-1").version
    feed(request)
    feed(delete_requested())
    assert journal.conversation("conv-1").version == version


@pytest.mark.rule("X8")
def test_key_destroyed_before_tombstone_commit_still_refuses_admissions(feed, journal, keyring) -> None:
    """The crash window: the key is gone but ``Deleted`` never committed. Nothing new is admitted, the old
    bodies read as shredded, and the redelivered request finishes the tombstone."""
    feed(*to_running("r1"), completed("r1"))
    keyring.destroy("conv-1")  # what delete did before the crash
    feed(admitted("r2", message_id="m2"))
    assert [r.code for r in journal.execution("r2").refusals] == ["conversation_deleted"]
    from services.journal.queries import JournalQueries

    view = JournalQueries(journal).execution("r1", ACCOUNT, "completed")
    assert view.answer_text is None and view.shredded and view.question is None
    feed(delete_requested())
    assert journal.conversation("conv-1").deleted and journal.execution("r1").erased


@pytest.mark.rule("X8")
def test_retention_sweep_deletes_only_expired_conversations(feed, journal, keyring) -> None:
    feed(*to_running("r1", conversation_id="old"), completed("r1"))
    feed(*to_running("r2", conversation_id="young"))
    t_old = journal.conversation("old").last_activity_at
    t_young = journal.conversation("young").last_activity_at
    assert t_old < t_young
    now = t_young + timedelta(days=31)
    cutoff = t_old + (t_young - t_old) / 2
    assert journal.sweep_retention(now=now, max_age=now - cutoff) == ["old"]
    assert journal.conversation("old").deleted and journal.conversation("old").deletion_reason == "retention"
    assert keyring.is_destroyed("old") and not keyring.is_destroyed("young")
    assert journal.execution("r1").erased and not journal.execution("r2").erased
    assert journal.sweep_retention(now=now, max_age=timedelta(days=400)) == []
    assert journal.sweep_retention(now=now, max_age=timedelta(days=30)) == ["young"]  # old is not deleted twice


@pytest.mark.rule("X8")
def test_admission_racing_deletion_in_threads_is_never_half_deleted(keyring) -> None:
    """Two journal instances over one store race an admission against a deletion, many times."""
    # POPO stores are per instance, so two instances share one SQLite file to race for real.
    import tempfile
    from pathlib import Path

    from journal_helpers import Feeder

    with tempfile.TemporaryDirectory() as tmp:
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(Path(tmp) / "j.sqlite"), "SQLITE_LOCK_TIMEOUT": "10"}
        a = RuntimeJournal(env, keyring=keyring)
        b = RuntimeJournal(env, keyring=keyring)
        fa, fb = Feeder(a), Feeder(b)
        outcomes = {"admitted_then_erased": 0, "refused": 0}
        for i in range(40):
            cid = f"race-{i}"
            adm = fa.wrap(admitted(f"r{i}", conversation_id=cid, message_id=f"m{i}"))
            dele = fb.wrap(delete_requested(cid))
            t1 = threading.Thread(target=a.process, args=(adm,))
            t2 = threading.Thread(target=b.process, args=(dele,))
            t1.start(), t2.start()
            t1.join(), t2.join()
            conv, ex = a.conversation(cid), a.execution(f"r{i}")
            assert conv.deleted and keyring.is_destroyed(cid)
            if ex.admitted:
                assert ex.erased and f"r{i}" in conv.run_ids
                outcomes["admitted_then_erased"] += 1
            else:
                assert [r.code for r in ex.refusals] == ["conversation_deleted"] and f"r{i}" not in conv.run_ids
                outcomes["refused"] += 1
        a.close(), b.close()
        assert sum(outcomes.values()) == 40, outcomes
        print("race outcomes", outcomes, "conflicts", a.conflicts + b.conflicts)


@pytest.mark.rule("X8")
def test_sqlite_keyring_overwrites_key_bytes_on_disk(tmp_path) -> None:
    embedded = backend_for(Settings(state_dir=tmp_path, database_url=None))
    path = tmp_path / "data" / "keyring.sqlite"
    ring = embedded.keyring()
    key = ring.key_for("c1", create=True)
    assert ring.key_for("c1", create=True) == key == ring.key_for("c1")
    assert key in path.read_bytes()
    ring.destroy("c1")
    assert ring.is_destroyed("c1") and ring.key_for("c1") is None
    with pytest.raises(KeyDestroyed):
        ring.key_for("c1", create=True)
    ring.close()
    assert key not in path.read_bytes()  # secure_delete zeroed the old cell
    again = embedded.keyring()
    assert again.is_destroyed("c1") and again.key_for("unknown") is None and not again.is_destroyed("unknown")
    again.destroy("never-had-a-key")
    assert again.is_destroyed("never-had-a-key")
    again.close()


@pytest.mark.rule("X8")
def test_in_memory_keyring_contract() -> None:
    ring = InMemoryKeyring()
    assert ring.key_for("c") is None
    key = ring.key_for("c", create=True)
    assert len(key) == 32 and ring.key_for("c") == key
    ring.destroy("c")
    assert ring.key_for("c") is None and ring.is_destroyed("c")


@pytest.mark.rule("X8")
def test_scoped_keyring_caches_existing_keys_only_and_evicts_on_destroy() -> None:
    from imprint.shredding import ScopedKeyring

    inner = InMemoryKeyring()
    scoped = ScopedKeyring(inner)
    assert scoped.key_for("c") is None and scoped.key_for("c", create=True) == inner.key_for("c")
    scoped.destroy("c")
    assert inner.is_destroyed("c") and scoped.key_for("c") is None and scoped.is_destroyed("c")
    with pytest.raises(KeyDestroyed):
        scoped.key_for("c", create=True)
    other = ScopedKeyring(inner)
    inner.key_for("d", create=True)
    other.key_for("d")
    inner.destroy("d")  # destroyed elsewhere: is_destroyed is never cached
    assert other.is_destroyed("d")

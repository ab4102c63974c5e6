"""Publication's key cache (``keys.RecentKeys``): a destroyed key is never used past
``max_age`` (X8), and expired keys of busy conversations are read again together, one
query per ``max_age``, not one per conversation."""

from __future__ import annotations

from typing import Any

import pytest

from imprint.shredding import KeyDestroyed
from imprint.shredding import InMemoryKeyring
from services.publication import keys as publication_keys
from services.publication.keys import RecentKeys


class CountingKeyring(InMemoryKeyring):
    def __init__(self) -> None:
        super().__init__()
        self.single = 0
        self.bulk: list[list[str]] = []

    def key_for(self, conversation_id: str, create: bool = False) -> bytes | None:
        self.single += 1
        return super().key_for(conversation_id, create)

    def keys_for(self, conversation_ids: Any) -> dict[str, bytes | None]:
        self.bulk.append(sorted(conversation_ids))
        return super().keys_for(conversation_ids)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(publication_keys.time, "monotonic", lambda: now[0])
    return now


@pytest.mark.rule("X8")
def test_expired_keys_of_busy_conversations_are_read_again_in_one_query(clock: list[float]) -> None:
    table = CountingKeyring()
    keys = RecentKeys(table, max_age=1.0, keep=10.0)
    first = {c: keys.key_for(c, create=True) for c in ("c1", "c2", "c3")}
    assert table.single == 3
    clock[0] += 0.5
    assert {c: keys.key_for(c) for c in first} == first and table.single == 3  # fresh: no read
    clock[0] += 0.6
    assert keys.key_for("c2") == first["c2"]
    assert table.bulk == [["c1", "c2", "c3"]], "one read for every expired key"
    assert {c: keys.key_for(c) for c in first} == first
    assert table.single == 3 and len(table.bulk) == 1


@pytest.mark.rule("X8")
def test_a_key_destroyed_elsewhere_is_not_used_past_max_age(clock: list[float]) -> None:
    table = CountingKeyring()
    keys = RecentKeys(table, max_age=1.0)
    assert keys.key_for("c1", create=True) is not None
    keys.key_for("c2", create=True)
    table.destroy("c1")  # by another process: this cache does not hear of it
    clock[0] += 0.5
    assert keys.key_for("c1") is not None  # within max_age, as documented
    clock[0] += 0.6
    assert keys.key_for("c2") is not None  # c2's refresh reads c1 again too
    assert keys.key_for("c1") is None
    with pytest.raises(KeyDestroyed):
        keys.key_for("c1", create=True)  # never a new key under a destroyed conversation


@pytest.mark.rule("X8")
def test_keys_not_used_lately_are_dropped_not_read_again(clock: list[float]) -> None:
    table = CountingKeyring()
    keys = RecentKeys(table, max_age=1.0, keep=5.0)
    keys.key_for("idle", create=True)
    keys.key_for("busy", create=True)
    for _ in range(8):
        clock[0] += 1.1
        keys.key_for("busy")
    assert table.bulk[0] == ["busy", "idle"]
    assert all(batch == ["busy"] for batch in table.bulk[5:]), "idle is dropped once not used for 5 s"


class CreatingKeyring(CountingKeyring):
    def __init__(self) -> None:
        super().__init__()
        self.created: list[list[str]] = []

    def create_keys(self, conversation_ids: Any) -> None:
        self.created.append(sorted(conversation_ids))
        super().create_keys(conversation_ids)


@pytest.mark.rule("X8")
def test_a_unit_over_new_conversations_reads_and_creates_their_keys_together(clock: list[float]) -> None:
    table = CreatingKeyring()
    table.key_for("known", create=True)
    table.key_for("deleted", create=True)
    table.destroy("deleted")
    table.single = 0
    keys = RecentKeys(table, max_age=1.0)
    keys.prepare(["new-1", "new-2", "known", "deleted"])
    assert table.bulk[0] == ["deleted", "known", "new-1", "new-2"], "one read for the whole unit"
    assert table.created == [["deleted", "new-1", "new-2"]], "the missing keys created together"
    sealed_under = {c: keys.key_for(c, create=True) for c in ("new-1", "new-2", "known")}
    assert all(sealed_under.values()) and table.single == 0, "sealing asks the table no more"
    with pytest.raises(KeyDestroyed):
        keys.key_for("deleted", create=True)  # a destroyed conversation never gets a fresh key
    reads = len(table.bulk)
    keys.prepare(["new-1", "known"])
    assert len(table.bulk) == reads, "keys remembered within max_age are not read again"


@pytest.mark.rule("X8")
def test_a_unit_whose_key_is_due_refreshes_every_busy_key_with_its_new_ones_in_one_query(
        clock: list[float]) -> None:
    table = CreatingKeyring()
    keys = RecentKeys(table, max_age=1.0, keep=10.0)
    keys.prepare(["a", "b"])
    reads = len(table.bulk)
    clock[0] += 1.5
    keys.prepare(["a", "c"])  # a is due; b, used lately, is due too; c is new
    assert table.bulk[reads] == ["a", "b", "c"], "one read: the due keys and the unit's new ones"
    assert table.created[-1] == ["c"]
    reads = len(table.bulk)
    clock[0] += 0.2
    keys.prepare(["b"])
    assert len(table.bulk) == reads, "b was read again with a: the next unit asks nothing"

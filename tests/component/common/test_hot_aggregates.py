"""The hot aggregates' cache (``services.common.unit_of_work.HotAggregates``): least recently
used out first, bounded by count and by what the aggregates hold together, weighed each
time one is put; the aggregate put last is never the one evicted. (That a run evicted by
the bound is read again from the log and decides as before is
``tests/integration/publication/test_publication_hot_cache.py``.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from services.common.event_log import HotAggregates, entries


class Held:
    """An aggregate's attributes as the cache sees them: collections and plain values."""

    def __init__(self, blocks: int, name: str = "run") -> None:
        self.name = name
        self.blocks: dict[str, Any] = {f"b{i}": {"revision": 1} for i in range(blocks)}
        self.candidates: list[str] = []
        self.version = 1


def ids(count: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(count)]


def test_an_aggregate_weighs_one_plus_the_entries_of_its_collections() -> None:
    run = Held(blocks=3)
    run.candidates.extend(["c1", "c2"])
    assert entries(run) == 1 + 3 + 2


def test_the_least_recently_used_go_first_once_the_entries_exceed_the_bound() -> None:
    cache = HotAggregates(maxsize=100, max_entries=25)
    a, b, c = ids(3)
    cache.put(a, Held(blocks=9))  # 10 entries
    cache.put(b, Held(blocks=9))  # 20
    cache.get(a)                  # a is now the most recently used
    cache.put(c, Held(blocks=9))  # 30 > 25: b goes, not a
    assert set(cache.cache) == {a, c} and cache.held == 20
    with pytest.raises(KeyError):
        cache.get(b)


def test_the_count_bound_still_holds() -> None:
    cache = HotAggregates(maxsize=2, max_entries=10_000)
    a, b, c = ids(3)
    for key in (a, b, c):
        cache.put(key, Held(blocks=1))
    assert list(cache.cache) == [b, c] and cache.held == 4


def test_an_aggregate_is_weighed_again_when_it_is_put_again() -> None:
    cache = HotAggregates(maxsize=100, max_entries=30)
    a, b = ids(2)
    run = Held(blocks=4)
    cache.put(a, run)
    cache.put(b, Held(blocks=4))
    assert cache.held == 10
    run.blocks.update({f"new{i}": {} for i in range(20)})  # changed in place by a unit of work
    cache.put(a, run)  # the library puts every saved aggregate back
    assert cache.held == 30 and set(cache.cache) == {a, b}
    run.blocks["one more"] = {}
    cache.put(a, run)  # 31 > 30: the other one goes
    assert set(cache.cache) == {a} and cache.held == 26


def test_the_aggregate_put_last_stays_however_much_it_holds() -> None:
    cache = HotAggregates(maxsize=100, max_entries=10)
    a, b = ids(2)
    cache.put(a, Held(blocks=2))
    huge = Held(blocks=50)
    cache.put(b, huge)
    assert list(cache.cache) == [b] and cache.get(b) is huge and cache.held == 51


def test_an_evicted_aggregate_no_longer_counts_and_an_empty_cache_is_still_the_cache() -> None:
    cache = HotAggregates(maxsize=100, max_entries=100)
    a = uuid.uuid4()
    assert cache, "the repository asks `if self.cache`: empty, it must still be used"
    cache.put(a, Held(blocks=5))
    assert cache.get(a, evict=True).name == "run"
    assert cache.held == 0 and not cache.cache
    with pytest.raises(KeyError):
        cache.get(a, evict=True)
    cache.put(a, None)  # the library may put nothing: ignored
    assert not cache.cache


def test_an_aggregate_that_is_done_is_not_kept_and_leaves_if_it_was() -> None:
    done: set[str] = set()
    cache = HotAggregates(maxsize=100, max_entries=100, stays_hot=lambda held: held.name not in done)
    a, b = ids(2)
    cache.put(a, Held(blocks=2, name="a"))
    cache.put(b, Held(blocks=3, name="b"))
    done.add("a")
    cache.put(a, Held(blocks=2, name="a"))  # saved once more, as it ended
    assert list(cache.cache) == [b] and cache.held == 4
    with pytest.raises(KeyError):
        cache.get(a)
    cache.put(a, Held(blocks=2, name="a"))  # read back for a late message: still not kept
    assert list(cache.cache) == [b] and cache.held == 4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_done_aggregate_is_kept_for_its_messages_that_trail_and_then_leaves() -> None:
    done: set[str] = set()
    clock = Clock()
    cache = HotAggregates(maxsize=100, max_entries=100, stays_hot=lambda held: held.name not in done,
                          kept_after_done=60.0, clock=clock)
    a, b, c = ids(3)
    cache.put(a, Held(blocks=2, name="a"))
    cache.put(b, Held(blocks=3, name="b"))
    done.update({"a", "b"})
    cache.put(a, Held(blocks=2, name="a"))  # saved as it ended
    clock.now += 30
    cache.put(b, Held(blocks=3, name="b"))
    clock.now += 29
    cache.put(a, Held(blocks=2, name="a"))  # a trailing message, within the minute: still here
    assert set(cache.cache) == {a, b}
    clock.now += 1
    cache.put(c, Held(blocks=1, name="c"))  # any put lets go of what is due: a, done 60 s ago
    assert list(cache.cache) == [b, c] and cache.held == 4 + 2
    with pytest.raises(KeyError):
        cache.get(a)
    clock.now += 30
    cache.put(c, Held(blocks=1, name="c"))
    assert list(cache.cache) == [c] and cache.held == 2
    cache.put(a, Held(blocks=2, name="a"))  # read back for a late message: kept a minute again
    clock.now += 59
    cache.put(c, Held(blocks=1, name="c"))
    assert set(cache.cache) == {a, c}


def test_a_done_aggregate_pushed_out_by_the_bound_is_not_retired_twice() -> None:
    clock = Clock()
    cache = HotAggregates(maxsize=2, max_entries=100, stays_hot=lambda held: held.name != "done",
                          kept_after_done=10.0, clock=clock)
    a, b, c = ids(3)
    cache.put(a, Held(blocks=1, name="done"))
    cache.put(b, Held(blocks=1))
    cache.put(c, Held(blocks=1))  # the count bound pushes a out
    assert list(cache.cache) == [b, c]
    clock.now += 11
    cache.put(b, Held(blocks=1))
    assert list(cache.cache) == [c, b] and cache.held == 4

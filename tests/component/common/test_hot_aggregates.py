"""The hot aggregates' cache (``services.common.hot_cache.HotAggregates``): least recently
used out first, bounded by count and by bytes, an aggregate weighed at the stored bytes
read to build it plus those recorded on it since; the aggregate put last is never the one
evicted. (That a run evicted by the bound is read again from the log and decides as
before is ``tests/integration/publication/test_publication_hot_cache.py``; the weighing
of real aggregates, ``test_hot_cache_calibration.py``.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from services.common.hot_cache import HotAggregates, WeighingMapper, bytes_loaded, start_load


class Stub:
    """An application's mapper, as far as the weighing one delegates to it."""

    def to_domain_event(self, stored: StoredEvent) -> str:
        return "event"


class Held:
    """An aggregate as the cache sees it: whatever it holds, never looked into."""

    def __init__(self, blocks: int, name: str = "run") -> None:
        self.name = name
        self.blocks: dict[str, Any] = {f"b{i}": {"revision": 1} for i in range(blocks)}
        self.version = 1


def put(cache: HotAggregates, key: uuid.UUID, value: Held, stored_bytes: int | None = None) -> None:
    """Put ``value`` as a commit does, having recorded ``stored_bytes`` on it (by default
    one byte plus one per block, so the arithmetic below stays readable)."""
    cache.put_recorded(key, value, 1 + len(value.blocks) if stored_bytes is None else stored_bytes)


def ids(count: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(count)]


def test_an_aggregate_read_from_the_log_weighs_the_stored_bytes_read_to_build_it() -> None:
    cache = HotAggregates(maxsize=100, max_bytes=10_000, overhead=3.0)
    a, b = ids(2)
    start_load()
    assert bytes_loaded() == 0
    WeighingMapper(Stub()).to_domain_event(  # type: ignore[arg-type]
        StoredEvent(uuid.uuid4(), 1, "topic", b"x" * 600))
    cache.put(a, Held(blocks=6))  # the repository's put, after its read
    assert cache.weight(a) == 1800 and cache.held == 1800
    start_load()
    cache.put(a, Held(blocks=6))  # put again without a read (already cached): unchanged
    assert cache.weight(a) == 1800
    cache.put_recorded(a, Held(blocks=7), 100)  # a commit recorded 100 bytes on it
    assert cache.weight(a) == 2100
    cache.put_recorded(b, Held(blocks=1), 50)  # created by a unit: weighs what was recorded
    assert cache.weight(b) == 150 and cache.held == 2250


def test_the_cache_stays_within_its_byte_budget_under_many_puts() -> None:
    budget = 50_000
    cache = HotAggregates(maxsize=1_000_000, max_bytes=budget, overhead=4.0)
    keys = ids(500)
    for step in range(20_000):
        key = keys[(step * 7919) % len(keys)]
        put(cache, key, Held(blocks=0), stored_bytes=(step % 37) * 11)
        assert cache.held <= budget or len(cache.cache) == 1
        assert cache.held == sum(cache.weight(k) for k in cache.cache)
    assert len(cache.cache) < len(keys), "the budget, not the count, decided what stayed"


def test_the_least_recently_used_go_first_once_the_entries_exceed_the_bound() -> None:
    cache = HotAggregates(maxsize=100, max_bytes=25, overhead=1.0)
    a, b, c = ids(3)
    put(cache, a, Held(blocks=9))  # 10 bytes
    put(cache, b, Held(blocks=9))  # 20
    cache.get(a)                  # a is now the most recently used
    put(cache, c, Held(blocks=9))  # 30 > 25: b goes, not a
    assert set(cache.cache) == {a, c} and cache.held == 20
    with pytest.raises(KeyError):
        cache.get(b)


def test_the_count_bound_still_holds() -> None:
    cache = HotAggregates(maxsize=2, max_bytes=10_000, overhead=1.0)
    a, b, c = ids(3)
    for key in (a, b, c):
        put(cache, key, Held(blocks=1))
    assert list(cache.cache) == [b, c] and cache.held == 4


def test_an_aggregate_is_weighed_again_when_it_is_put_again() -> None:
    cache = HotAggregates(maxsize=100, max_bytes=30, overhead=1.0)
    a, b = ids(2)
    run = Held(blocks=4)
    put(cache, a, run)
    put(cache, b, Held(blocks=4))
    assert cache.held == 10
    run.blocks.update({f"new{i}": {} for i in range(20)})  # changed in place by a unit of work
    put(cache, a, run, 20)  # the library puts every saved aggregate back
    assert cache.held == 30 and set(cache.cache) == {a, b}
    run.blocks["one more"] = {}
    put(cache, a, run, 1)  # 31 > 30: the other one goes
    assert set(cache.cache) == {a} and cache.held == 26


def test_the_aggregate_put_last_stays_however_much_it_holds() -> None:
    cache = HotAggregates(maxsize=100, max_bytes=10, overhead=1.0)
    a, b = ids(2)
    put(cache, a, Held(blocks=2))
    huge = Held(blocks=50)
    put(cache, b, huge)
    assert list(cache.cache) == [b] and cache.get(b) is huge and cache.held == 51


def test_an_evicted_aggregate_no_longer_counts_and_an_empty_cache_is_still_the_cache() -> None:
    cache = HotAggregates(maxsize=100, max_bytes=100, overhead=1.0)
    a = uuid.uuid4()
    assert cache, "the repository asks `if self.cache`: empty, it must still be used"
    put(cache, a, Held(blocks=5))
    assert cache.get(a, evict=True).name == "run"
    assert cache.held == 0 and not cache.cache
    with pytest.raises(KeyError):
        cache.get(a, evict=True)
    cache.put(a, None)  # the library may put nothing: ignored
    assert not cache.cache


def test_an_aggregate_that_is_done_is_not_kept_and_leaves_if_it_was() -> None:
    done: set[str] = set()
    cache = HotAggregates(maxsize=100, max_bytes=100, overhead=1.0, stays_hot=lambda held: held.name not in done)
    a, b = ids(2)
    put(cache, a, Held(blocks=2, name="a"))
    put(cache, b, Held(blocks=3, name="b"))
    done.add("a")
    put(cache, a, Held(blocks=2, name="a"))  # saved once more, as it ended
    assert list(cache.cache) == [b] and cache.held == 4
    with pytest.raises(KeyError):
        cache.get(a)
    put(cache, a, Held(blocks=2, name="a"))  # read back for a late message: still not kept
    assert list(cache.cache) == [b] and cache.held == 4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_done_aggregate_is_kept_for_its_messages_that_trail_and_then_leaves() -> None:
    done: set[str] = set()
    clock = Clock()
    cache = HotAggregates(maxsize=100, max_bytes=100, overhead=1.0, stays_hot=lambda held: held.name not in done,
                          kept_after_done=60.0, clock=clock)
    a, b, c = ids(3)
    put(cache, a, Held(blocks=2, name="a"))
    put(cache, b, Held(blocks=3, name="b"))
    done.update({"a", "b"})
    put(cache, a, Held(blocks=2, name="a"), 0)  # saved as it ended
    clock.now += 30
    put(cache, b, Held(blocks=3, name="b"), 0)
    clock.now += 29
    put(cache, a, Held(blocks=2, name="a"), 0)  # a trailing message, within the minute: still here
    assert set(cache.cache) == {a, b}
    clock.now += 1
    put(cache, c, Held(blocks=1, name="c"))  # any put lets go of what is due: a, done 60 s ago
    assert list(cache.cache) == [b, c] and cache.held == 4 + 2
    with pytest.raises(KeyError):
        cache.get(a)
    clock.now += 30
    put(cache, c, Held(blocks=1, name="c"), 0)
    assert list(cache.cache) == [c] and cache.held == 2
    put(cache, a, Held(blocks=2, name="a"))  # read back for a late message: kept a minute again
    clock.now += 59
    put(cache, c, Held(blocks=1, name="c"), 0)
    assert set(cache.cache) == {a, c}


def test_a_done_aggregate_pushed_out_by_the_bound_is_not_retired_twice() -> None:
    clock = Clock()
    cache = HotAggregates(maxsize=2, max_bytes=100, overhead=1.0, stays_hot=lambda held: held.name != "done",
                          kept_after_done=10.0, clock=clock)
    a, b, c = ids(3)
    put(cache, a, Held(blocks=1, name="done"))
    put(cache, b, Held(blocks=1))
    put(cache, c, Held(blocks=1))  # the count bound pushes a out
    assert list(cache.cache) == [b, c]
    clock.now += 11
    put(cache, b, Held(blocks=1), 0)
    assert list(cache.cache) == [c, b] and cache.held == 4

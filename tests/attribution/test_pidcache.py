"""PidCache and the CollectionScoped resolver base shared by the owner and pod resolvers."""

from __future__ import annotations

import pytest

from exporter.attribution.pidcache import CollectionScoped, PidCache


class _Counting(CollectionScoped[str, int]):
    """Resolves a pid to how many times it was really resolved so far."""

    def __init__(self, max_entries: int = 8) -> None:
        super().__init__(max_entries)
        self.calls: dict[int, int] = {}

    def resolve(self, pid: int) -> int:
        return self._memoised(pid, lambda: self._count(pid))

    def _count(self, pid: int) -> int:
        self._pids.touch(pid)
        self._pids.put(pid, f"entry {pid}")
        self.calls[pid] = self.calls.get(pid, 0) + 1
        return self.calls[pid]


def test_put_caps_entries_dropping_the_oldest() -> None:
    cache: PidCache[str, int] = PidCache(max_entries=3)
    for pid in range(1, 6):
        cache.put(pid, f"e{pid}")
    assert list(cache.entries) == [3, 4, 5]
    cache.put(3, "again")  # a re-put pid becomes the newest
    cache.put(6, "e6")
    assert list(cache.entries) == [5, 3, 6]


def test_end_evicts_pids_not_touched_in_the_collection() -> None:
    cache: PidCache[str, int] = PidCache(max_entries=8)
    cache.touch(1)  # outside a collection: not tracked
    cache.put(1, "a")
    cache.put(2, "b")
    cache.begin()
    assert cache.memo == {}
    cache.touch(2)
    cache.end()
    assert cache.entries == {2: "b"}
    assert cache.memo is None


def test_memoised_once_per_collection_and_not_outside() -> None:
    resolver = _Counting()
    with resolver.collection():
        assert [resolver.resolve(7), resolver.resolve(7)] == [1, 1]
    with resolver.collection():
        assert resolver.resolve(7) == 2
    assert [resolver.resolve(7), resolver.resolve(7)] == [3, 4]


def test_collection_ends_when_the_body_raises() -> None:
    resolver = _Counting()
    resolver.resolve(1)  # cached outside a collection

    def fail_inside() -> None:
        with resolver.collection():
            resolver.resolve(2)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert set(resolver._pids.entries) == {2}  # 1 was not looked up: evicted
    assert resolver._pids.memo is None

"""Per-pid caching scoped by collections, shared by the owner and pod resolvers.

``PidCache`` holds the entries; ``CollectionScoped`` is the thread-safe resolver base that
opens and closes collections around one snapshot's lookups and memoises each pid's result
inside a collection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

E = TypeVar("E")
R = TypeVar("R")


class PidCache(Generic[E, R]):
    """Per-pid state of a resolver, scoped by collections. Not thread-safe (callers lock).

    ``entries`` outlive collections (each entry carries what identifies its process, such as
    the start time); ``end`` evicts pids not touched since ``begin``, and ``put`` caps the size
    so memory stays bounded even if collections are never marked. ``memo`` holds this
    collection's results (each pid is resolved once however many GPUs list it); it is None
    outside a collection.
    """

    def __init__(self, max_entries: int) -> None:
        self.entries: dict[int, E] = {}
        self.memo: dict[int, R] | None = None
        self._seen: set[int] = set()
        self._max_entries = max_entries

    def begin(self) -> None:
        """Open a collection (empty memo)."""
        self.memo = {}

    def end(self) -> None:
        """Close a collection: evict entries of pids not touched in it."""
        self.entries = {pid: e for pid, e in self.entries.items() if pid in self._seen}
        self._seen.clear()
        self.memo = None

    def touch(self, pid: int) -> None:
        """Mark ``pid`` as listed in this collection (no-op outside one)."""
        if self.memo is not None:
            self._seen.add(pid)

    def put(self, pid: int, entry: E) -> None:
        """Store an entry, dropping the oldest ones beyond ``max_entries``."""
        self.entries.pop(pid, None)
        while self.entries and len(self.entries) >= self._max_entries:
            del self.entries[next(iter(self.entries))]
        self.entries[pid] = entry


class CollectionScoped(Generic[E, R]):
    """Base of a thread-safe pid resolver: a ``PidCache`` behind a re-entrant lock.

    Use ``with resolver.collection(): ...`` (or ``begin_collection``/``end_collection``) around
    one snapshot's lookups: inside a collection each pid is resolved at most once, and at the
    end cache entries of pids not looked up are evicted.
    """

    def __init__(self, max_entries: int) -> None:
        self._pids: PidCache[E, R] = PidCache(max_entries)
        # Re-entrant: subclasses extend begin_collection under the same lock.
        self._lock = threading.RLock()

    def begin_collection(self) -> None:
        """Start one snapshot's lookups."""
        with self._lock:
            self._pids.begin()

    def end_collection(self) -> None:
        """Finish a collection: evict cached pids that were not looked up in it."""
        with self._lock:
            self._pids.end()

    @contextmanager
    def collection(self) -> Iterator[None]:
        """``begin_collection`` ... ``end_collection`` (also when the body raises)."""
        self.begin_collection()
        try:
            yield
        finally:
            self.end_collection()

    def _memoised(self, pid: int, resolve: Callable[[], R]) -> R:
        """This collection's result for ``pid``, from ``resolve()`` (under the lock) if new.

        Outside a collection nothing is memoised. Raises whatever ``resolve`` raises.
        """
        with self._lock:
            memo = self._pids.memo
            if memo is not None and pid in memo:
                return memo[pid]
            result = resolve()
            if memo is not None:
                memo[pid] = result
            return result

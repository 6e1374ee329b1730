"""The one bounded in-memory cache type of the package: :class:`BoundedCache`, with a pluggable eviction policy.

Every per-process cache of byte-layer results (FLAC headers, shard listings,
Parquet footers and cell maps, open checks, staleness outcomes, epoch orders)
is a :class:`BoundedCache`: a size limit in entries and/or bytes, eviction by
an :class:`EvictionPolicy` (:class:`LeastRecentlyUsed` unless told; a policy
that evicts by next use plugs in the same way), one lock, and hit/miss counts
that also go to :mod:`audiotree.io.byte_counters` under the cache's name.

Per process, as its name says:

- pickled (a spawned worker, a Grain or torch worker), a cache takes its
  settings and leaves its entries and lock behind
  (:class:`~audiotree.process_local.ProcessLocal`);
- after a fork, the child gets a fresh lock (a parent thread may have held the
  old one at the fork) and zeroed counts; the entries it inherited stay valid.

>>> c = BoundedCache("doc", max_entries=2)
>>> c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)
1
>>> sorted(c.keys()), c.get("b"), c.hits, c.misses
(['a', 'c'], None, 1, 1)
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Any, Callable, Hashable

from audiotree.io import byte_counters
from audiotree.process_local import ProcessLocal

__all__ = ["BoundedCache", "EvictionPolicy", "LeastRecentlyUsed", "FirstInFirstOut", "MISSING", "memoized"]

#: What :meth:`BoundedCache.get` returns for an absent key when asked to (``default=MISSING``): for caches that
#: keep ``None`` as a value.
MISSING: Any = object()


class EvictionPolicy:
    """Which entry leaves a full cache. The cache tells it what was added, used and removed, and asks
    :meth:`victim`. A policy that evicts by next use (the known item order) subclasses this."""

    def added(self, key: Hashable) -> None:
        raise NotImplementedError

    def used(self, key: Hashable) -> None:
        raise NotImplementedError

    def removed(self, key: Hashable) -> None:
        raise NotImplementedError

    def victim(self) -> Hashable:
        """The key to evict next (the cache holds at least one entry)."""
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError


class LeastRecentlyUsed(EvictionPolicy):
    """Evicts the entry used (read or written) longest ago."""

    def __init__(self) -> None:
        self._order: collections.OrderedDict = collections.OrderedDict()

    def added(self, key: Hashable) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def used(self, key: Hashable) -> None:
        self._order.move_to_end(key)

    def removed(self, key: Hashable) -> None:
        self._order.pop(key, None)

    def victim(self) -> Hashable:
        return next(iter(self._order))

    def clear(self) -> None:
        self._order.clear()


class FirstInFirstOut(LeastRecentlyUsed):
    """Evicts the entry added longest ago; reads do not keep an entry (a window over an advancing position, such
    as the epochs of a run)."""

    def used(self, key: Hashable) -> None:
        pass


def _weight(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return int(getattr(value, "nbytes", 0) or 0)


_live: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()


class BoundedCache(ProcessLocal):
    """A per-process mapping of at most ``max_entries`` entries and ``max_bytes`` bytes (``None``: no limit).

    ``weigh(value)`` gives an entry's bytes (default: ``len`` of bytes, else an
    array's ``nbytes``, else 0). The last entry is never evicted, so one entry
    over ``max_bytes`` stays until the next one comes; which of the others go is
    the policy's choice (a policy by next use may drop the entry just added). ``policy`` is an
    :class:`EvictionPolicy` class (or any callable returning one). ``counted=False`` keeps its lookups out of
    :mod:`audiotree.io.byte_counters` (a cache of something other than read results; :meth:`stats` still counts).
    """

    process_local = {"_lock": threading.Lock, "_entries": dict, "_weights": dict}

    def __init__(self, name: str, *, max_entries: int | None = None, max_bytes: int | None = None,
                 policy: Callable[[], EvictionPolicy] = LeastRecentlyUsed,
                 weigh: Callable[[Any], int] = _weight, counted: bool = True) -> None:
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be >= 1 or None, got {max_entries}.")
        self.name, self.max_entries, self.max_bytes = name, max_entries, max_bytes
        self.policy, self.weigh, self.counted = policy, weigh, counted
        self._lock = threading.Lock()
        self._entries: dict = {}
        self._weights: dict = {}
        self._fresh()
        _live.add(self)

    def _fresh(self) -> None:
        self._policy = self.policy()
        self.nbytes = 0
        self.hits = self.misses = 0

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for name in ("_policy", "nbytes", "hits", "misses"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._fresh()
        _live.add(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def keys(self) -> list:
        with self._lock:
            return list(self._entries)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value kept for ``key`` (marked used), or ``default``; counted as a hit or a miss."""
        with self._lock:
            value = self._entries.get(key, MISSING)
            hit = value is not MISSING
            if hit:
                self._policy.used(key)
                self.hits += 1
            else:
                self.misses += 1
        if self.counted:
            byte_counters.count_cache(self.name, hit=hit)
        return value if hit else default

    def put(self, key: Hashable, value: Any) -> None:
        """Keeps ``value`` for ``key``, evicting by the policy while the cache is over its limits."""
        weight = self.weigh(value) if self.max_bytes is not None else 0
        with self._lock:
            if key in self._entries:
                self.nbytes -= self._weights.pop(key, 0)
                self._policy.used(key)
            else:
                self._policy.added(key)
            self._entries[key] = value
            if self.max_bytes is not None:  # weights are kept only where a byte limit reads them
                self._weights[key] = weight
                self.nbytes += weight
            while len(self._entries) > 1 and self._over():
                self._drop(self._policy.victim())

    def _over(self) -> bool:
        return ((self.max_entries is not None and len(self._entries) > self.max_entries)
                or (self.max_bytes is not None and self.nbytes > self.max_bytes))

    def _drop(self, key: Hashable) -> None:
        self._entries.pop(key, None)
        self.nbytes -= self._weights.pop(key, 0)
        self._policy.removed(key)

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value kept for ``key``, else ``make()`` (called outside the lock), kept and returned."""
        value = self.get(key, MISSING)
        if value is MISSING:
            value = make()
            self.put(key, value)
        return value

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self._entries:
                return default
            value = self._entries[key]
            self._drop(key)
            return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weights.clear()
            self._policy.clear()
            self.nbytes = 0

    def stats(self) -> dict[str, int]:
        """``{"entries", "bytes", "hits", "misses"}`` of this cache in this process."""
        with self._lock:
            return {"entries": len(self._entries), "bytes": self.nbytes, "hits": self.hits, "misses": self.misses}


def memoized(name: str, *, max_entries: int) -> Callable[[Callable], Callable]:
    """A decorator keeping a function's results per positional arguments in a :class:`BoundedCache` (least
    recently used leave), reachable as the function's ``cache``; a call that raises keeps nothing.

    >>> @memoized("doc_square", max_entries=2)
    ... def square(x):
    ...     return x * x
    >>> square(3), square(3), square.cache.stats()["hits"]
    (9, 9, 1)
    """
    def wrap(func: Callable) -> Callable:
        import functools

        cache = BoundedCache(name, max_entries=max_entries)

        @functools.wraps(func)
        def call(*args: Hashable) -> Any:
            value = cache.get(args, MISSING)
            if value is MISSING:
                value = func(*args)
                cache.put(args, value)
            return value

        call.cache = cache  # type: ignore[attr-defined]
        return call

    return wrap


def _after_fork_in_child() -> None:
    for cache in list(_live):
        cache._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

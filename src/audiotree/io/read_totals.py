"""What a pipeline read from storage, summed over this process and every worker process it started.

:func:`read_stats` returns a :class:`ReadStats`: the requests, the bytes they
brought, the seconds reading threads waited on them (summed over threads and
processes, so it can exceed the wall time), and the hits and misses of the
byte layer's caches, in total and per backend (``"s3"``, ``"gcs"``,
``"http"``, ``"other"``). Grain's ``mp_prefetch`` workers and PyTorch
``DataLoader`` workers are counted whatever their start method (fork,
forkserver, spawn), also after they exit or are killed: every process adds its
counts to a shared board (:mod:`audiotree.io.read_board`) the moment it makes
them. :func:`reset_read_stats` starts the counts again from zero.

Seen from a worker, :func:`read_stats` sums that worker and the processes it
started. With ``AUDIOTREE_READ_STATS=off`` it counts this process only.
:func:`audiotree.io.byte_counters.byte_counters` stays this process's own
counts, per cache and per protocol.

>>> reset_read_stats()
>>> read_stats().requests
0
>>> (ReadStats(requests=3, bytes=3_000_000, wait_seconds=0.5) - ReadStats(requests=1, bytes=1_000_000)).bytes
2000000
>>> print(ReadStats(requests=40, bytes=5_000_000, wait_seconds=1.25, cache_hits=3, cache_misses=1).summary(items=32))
40 requests, 5.0 MB, 1.25 s waited; per item 1.25 requests, 156 KB; cache hits 75% of 4 lookups
"""

from __future__ import annotations

import dataclasses
import os
from types import MappingProxyType
from typing import Any, Mapping

from audiotree.io import byte_counters, read_board

__all__ = ["ReadStats", "BackendReads", "read_stats", "reset_read_stats"]


@dataclasses.dataclass(frozen=True)
class BackendReads:
    """The requests to one backend, the bytes they brought and the seconds reading threads waited on them."""

    requests: int = 0
    bytes: int = 0
    wait_seconds: float = 0.0


def _no_backends() -> Mapping[str, BackendReads]:
    return MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """Reads from storage of a process tree (see the module text); ``a - b`` is what was read between two
    snapshots.

    ``processes`` is how many processes counted anything (the retired rows of
    processes long dead are counted in the totals, not here).
    """

    requests: int = 0
    bytes: int = 0
    wait_seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    processes: int = 0
    by_backend: Mapping[str, BackendReads] = dataclasses.field(default_factory=_no_backends)

    @property
    def cache_hit_rate(self) -> float | None:
        """Hits per cache lookup (``None`` without a lookup)."""
        lookups = self.cache_hits + self.cache_misses
        return self.cache_hits / lookups if lookups else None

    def __sub__(self, other: ReadStats) -> ReadStats:
        if not isinstance(other, ReadStats):
            return NotImplemented
        by_backend = {}
        for name, mine in self.by_backend.items():
            theirs = other.by_backend.get(name, BackendReads())
            diff = BackendReads(max(0, mine.requests - theirs.requests), max(0, mine.bytes - theirs.bytes),
                                max(0.0, mine.wait_seconds - theirs.wait_seconds))
            if diff.requests or diff.bytes or diff.wait_seconds:
                by_backend[name] = diff
        return ReadStats(
            requests=max(0, self.requests - other.requests), bytes=max(0, self.bytes - other.bytes),
            wait_seconds=max(0.0, self.wait_seconds - other.wait_seconds),
            cache_hits=max(0, self.cache_hits - other.cache_hits),
            cache_misses=max(0, self.cache_misses - other.cache_misses),
            processes=self.processes, by_backend=MappingProxyType(by_backend),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers (for JSON)."""
        return {
            "requests": self.requests, "bytes": self.bytes, "wait_seconds": round(self.wait_seconds, 6),
            "cache_hits": self.cache_hits, "cache_misses": self.cache_misses, "processes": self.processes,
            "by_backend": {k: dataclasses.asdict(v) for k, v in self.by_backend.items()},
        }

    def summary(self, *, items: int | None = None) -> str:
        """One line: requests, MB, seconds waited, per item (when ``items`` is given) and the cache hit rate."""
        text = f"{self.requests:,} requests, {self.bytes / 1e6:.1f} MB, {self.wait_seconds:.2f} s waited"
        if items:
            text += f"; per item {self.requests / items:.2f} requests, {self.bytes / items / 1e3:.0f} KB"
        rate = self.cache_hit_rate
        if rate is not None:
            text += f"; cache hits {rate:.0%} of {self.cache_hits + self.cache_misses:,} lookups"
        return text


def _from_counts(counts: list[int], processes: int) -> ReadStats:
    by_backend = {}
    for name in read_board.BACKENDS:
        base = read_board.backend_cell(name, 0) - 2  # counts start at the row's cache hits
        reads = BackendReads(counts[base + read_board.REQUESTS], counts[base + read_board.BYTES],
                             counts[base + read_board.WAIT_NS] / 1e9)
        if reads.requests or reads.bytes or reads.wait_seconds:
            by_backend[name] = reads
    return ReadStats(
        requests=sum(b.requests for b in by_backend.values()), bytes=sum(b.bytes for b in by_backend.values()),
        wait_seconds=sum(b.wait_seconds for b in by_backend.values()),
        cache_hits=counts[read_board.HITS - 2], cache_misses=counts[read_board.MISSES - 2], processes=processes,
        by_backend=MappingProxyType(by_backend),
    )


def _this_process() -> ReadStats:
    snap = byte_counters.byte_counters()
    by_backend = {name: BackendReads(v["requests"], v["bytes_fetched"]) for name, v in snap["by_backend"].items()}
    return ReadStats(requests=snap["requests"], bytes=snap["bytes_fetched"], wait_seconds=snap["wait_seconds"],
                     cache_hits=snap["cache_hits"], cache_misses=snap["cache_misses"],
                     processes=int(bool(snap["requests"] or snap["cache_hits"] or snap["cache_misses"])),
                     by_backend=MappingProxyType(by_backend))


def _tree_totals() -> ReadStats:
    if read_board.reserve() is None:  # (a worker that counted nothing finds its tree's board here)
        return _this_process()
    rows = read_board.rows()
    if not read_board.owns_board():  # a worker: itself and what it started, by the parents the rows name
        below: dict[int, list[read_board.Row]] = {}
        for row in rows:
            below.setdefault(row.parent, []).append(row)
        mine = [row for row in rows if row.pid == os.getpid()]  # none when this process counted nothing itself
        todo = [os.getpid()]
        while todo:
            found = below.pop(todo.pop(), [])
            mine += found
            todo += [row.pid for row in found]
        rows = mine
    counts = [0] * (read_board.FIELDS - 2)
    for row in rows:
        for i, value in enumerate(row.counts):
            counts[i] += value
    return _from_counts(counts, sum(1 for row in rows if row.pid > 0))


_baseline = ReadStats()


def read_stats() -> ReadStats:
    """The reads of this process and every worker process it started, since the start or the last
    :func:`reset_read_stats`."""
    return _tree_totals() - _baseline


def reset_read_stats() -> None:
    """Counts from zero again (for :func:`read_stats`; :func:`~audiotree.io.byte_counters.byte_counters` keeps
    its own counts)."""
    global _baseline
    _baseline = _tree_totals()


def _after_fork_in_child() -> None:
    global _baseline
    _baseline = ReadStats()  # the child's own tree starts empty


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

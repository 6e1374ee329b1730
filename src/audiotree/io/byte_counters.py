"""What this process read: requests and bytes per backend, hits and misses per cache.

The byte layer counts in one place each: every GET of object bytes in
:mod:`audiotree.io.ranged_get` (ranged or whole), every metadata lookup (an
object's size and version) in :func:`audiotree.io.storage.object_info`, every
lookup of a :class:`~audiotree.io.byte_cache.BoundedCache`, and the time a
reading thread waits on a request (:func:`count_wait`). A retried request
counts once per try. Local reads and listings are not counted. :func:`byte_counters` returns a
snapshot, :func:`reset_byte_counters` sets them to zero. These counts belong to
one process: a forked child starts from zero. Every count also goes to the
process tree's board (:mod:`audiotree.io.read_board`), which
:func:`audiotree.io.read_totals.read_stats` sums over this process and its
workers.

>>> reset_byte_counters()
>>> count_request("http", 100); count_request("http", 20); count_cache("doc", hit=False)
>>> snap = byte_counters()
>>> snap["requests"], snap["bytes_fetched"], snap["cache_misses"], snap["by_backend"]["http"]
(2, 120, 1, {'requests': 2, 'bytes_fetched': 120})
"""

from __future__ import annotations

import os
import threading
from typing import Any

from audiotree.io import read_board
from audiotree.io.byte_paths import protocol

__all__ = ["count_request", "count_wait", "count_cache", "byte_counters", "reset_byte_counters", "backend_of"]

_BACKENDS = {"s3a": "s3", "gs": "gcs", "https": "http"}


def backend_of(url: str) -> str:
    """The backend name a URL's requests are counted under: ``"s3"``, ``"gcs"``, ``"http"``, else its protocol.

    >>> backend_of("s3a://b/k"), backend_of("gs://b/k"), backend_of("https://h/a.wav"), backend_of("memory://x")
    ('s3', 'gcs', 'http', 'memory')
    """
    name = protocol(url)
    return _BACKENDS.get(name, name)

_lock = threading.Lock()
_requests: dict[str, list[int]] = {}  # backend -> [requests, bytes]
_caches: dict[str, list[int]] = {}  # cache name -> [hits, misses]
_waits: dict[str, float] = {}  # backend -> seconds


def count_request(backend: str, nbytes: int, *, wait_seconds: float = 0.0) -> None:
    """Counts one request to ``backend`` (``"s3"``, ``"gcs"``, ``"http"``, ``"local"``, a protocol) that brought
    ``nbytes`` bytes, and the ``wait_seconds`` a reading thread was blocked on it (see :func:`count_wait`)."""
    nbytes = int(nbytes)
    with _lock:
        entry = _requests.setdefault(backend, [0, 0])
        entry[0] += 1
        entry[1] += nbytes
        if wait_seconds:
            _waits[backend] = _waits.get(backend, 0.0) + wait_seconds
    read_board.add(((read_board.backend_cell(backend, read_board.REQUESTS), 1),
                    (read_board.backend_cell(backend, read_board.BYTES), nbytes),
                    (read_board.backend_cell(backend, read_board.WAIT_NS), int(wait_seconds * 1e9))))


def count_wait(backend: str, seconds: float) -> None:
    """Counts ``seconds`` a reading thread spent blocked on remote bytes of ``backend`` without a request of its
    own (waiting for a read-ahead that another thread or task fetches); the wait of a request made by the
    reading thread itself is given to :func:`count_request`."""
    with _lock:
        _waits[backend] = _waits.get(backend, 0.0) + seconds
    read_board.add(((read_board.backend_cell(backend, read_board.WAIT_NS), int(seconds * 1e9)),))


def count_cache(name: str, *, hit: bool) -> None:
    """Counts one lookup in the cache ``name``."""
    with _lock:
        entry = _caches.setdefault(name, [0, 0])
        entry[0 if hit else 1] += 1
    read_board.add(((read_board.HITS if hit else read_board.MISSES, 1),))


def byte_counters() -> dict[str, Any]:
    """This process's counts since the start (or the last :func:`reset_byte_counters`).

    Keys: ``requests``, ``bytes_fetched``, ``wait_seconds`` (summed over backends),
    ``cache_hits``, ``cache_misses`` (summed over caches), ``by_backend``
    (``{backend: {"requests", "bytes_fetched"}}``) and ``by_cache``
    (``{name: {"hits", "misses"}}``).
    """
    with _lock:
        by_backend = {k: {"requests": v[0], "bytes_fetched": v[1]} for k, v in sorted(_requests.items())}
        by_cache = {k: {"hits": v[0], "misses": v[1]} for k, v in sorted(_caches.items())}
        wait = sum(_waits.values())
    return {
        "requests": sum(v["requests"] for v in by_backend.values()),
        "bytes_fetched": sum(v["bytes_fetched"] for v in by_backend.values()),
        "wait_seconds": wait,
        "cache_hits": sum(v["hits"] for v in by_cache.values()),
        "cache_misses": sum(v["misses"] for v in by_cache.values()),
        "by_backend": by_backend,
        "by_cache": by_cache,
    }


def reset_byte_counters() -> None:
    """Sets every count of this process to zero."""
    with _lock:
        _requests.clear()
        _caches.clear()
        _waits.clear()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent thread may have held the old one at the fork
    _requests.clear()
    _caches.clear()
    _waits.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

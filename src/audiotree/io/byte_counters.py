"""What this process read: requests and bytes per backend, hits and misses per cache.

The byte layer counts in one place each: every GET of object bytes in
:mod:`audiotree.io.ranged_get` (ranged or whole), every metadata lookup (an
object's size and version) in :func:`audiotree.io.storage.object_info`, every
lookup of a :class:`~audiotree.io.byte_cache.BoundedCache`. A retried request
counts once per try. Local reads and listings are not counted. :func:`byte_counters` returns a
snapshot, :func:`reset_byte_counters` sets them to zero. The counts belong to
one process: a forked child starts from zero (summing over workers counts each
request once).

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

from audiotree.io.byte_paths import protocol

__all__ = ["count_request", "count_cache", "byte_counters", "reset_byte_counters", "backend_of"]

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


def count_request(backend: str, nbytes: int) -> None:
    """Counts one request to ``backend`` (``"s3"``, ``"gcs"``, ``"http"``, ``"local"``, a protocol) that brought
    ``nbytes`` bytes."""
    with _lock:
        entry = _requests.setdefault(backend, [0, 0])
        entry[0] += 1
        entry[1] += int(nbytes)


def count_cache(name: str, *, hit: bool) -> None:
    """Counts one lookup in the cache ``name``."""
    with _lock:
        entry = _caches.setdefault(name, [0, 0])
        entry[0 if hit else 1] += 1


def byte_counters() -> dict[str, Any]:
    """This process's counts since the start (or the last :func:`reset_byte_counters`).

    Keys: ``requests``, ``bytes_fetched`` (summed over backends),
    ``cache_hits``, ``cache_misses`` (summed over caches), ``by_backend``
    (``{backend: {"requests", "bytes_fetched"}}``) and ``by_cache``
    (``{name: {"hits", "misses"}}``).
    """
    with _lock:
        by_backend = {k: {"requests": v[0], "bytes_fetched": v[1]} for k, v in sorted(_requests.items())}
        by_cache = {k: {"hits": v[0], "misses": v[1]} for k, v in sorted(_caches.items())}
    return {
        "requests": sum(v["requests"] for v in by_backend.values()),
        "bytes_fetched": sum(v["bytes_fetched"] for v in by_backend.values()),
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


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent thread may have held the old one at the fork
    _requests.clear()
    _caches.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

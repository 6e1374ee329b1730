"""The staleness check of index-backed datasets: once per remote file per process, every item for local files.

An item read through a corpus index checks first that its file is the one the
index describes (the same size and modification time as its row, see
:data:`audiotree.index.ON_STALE`). For a local file that is one ``stat``, about
a microsecond, made for every item: it catches a file edited during a run, and
a memo would buy nothing. For a file on object storage (``s3://``, ``gs://``,
``https://``, or a member of a remote tar shard or Parquet file) each check
is a metadata request (a ``HEAD``): per item, a round trip before every read,
as many requests as the read itself for a short file. So a remote file's
outcome is remembered per process, keyed by ``(url, expected size, expected
mtime)``: the first item of a file asks the storage, later items of that file
in the same process do not.

What the memo gives up: a remote object replaced *after* its first check in a
process is not noticed by that process (until :func:`clear`, or a new process);
its later items read the new bytes against the old row. An object changed before
its first check in a process is caught as before. A rebuilt index
records new sizes and times, so its rows are new keys and are checked afresh.

The memo is module state of the process, never part of a dataset: a dataset
pickles without it, so a spawned worker starts with an empty memo and checks
each file once itself; a forked worker starts with what its parent had checked
(checks as valid as its own). It is safe under threads (the read threads of one
worker share it), holds at most :data:`MAX_ENTRIES` files (least recently used
dropped; about 350 bytes each for a 70-character URL, so about 23 MB when full,
whatever the size of the corpus), and never remembers a failed lookup (a missing
object, a network error): those are asked again, so a transient failure is not
taken for a deleted file for the rest of the run. Keys are exact (the URL
itself, not a hash of it), so a remembered answer is never another file's.

>>> import fsspec
>>> fsspec.filesystem("memory").pipe("/freshness-doc/a.wav", b"RIFF")
>>> size, mtime = stat_of("memory://freshness-doc/a.wav")
>>> stale_reason("memory://freshness-doc/a.wav", size, mtime) is None
True
>>> stale_reason("memory://freshness-doc/a.wav", size + 1, mtime)
'its size changed from 5 to 4 bytes'
"""

from __future__ import annotations

from audiotree.errors import AudioReadError
from audiotree.io.byte_cache import MISSING, BoundedCache

__all__ = ["MAX_ENTRIES", "stale_reason", "change_reason", "stat_of", "is_remote", "entries", "clear"]

#: The most files the per-process memo remembers (least recently used dropped first).
#: Beyond it a file costs a request again: what a corpus read once per epoch in
#: random order pays anyway, while files read many times in a row (segments,
#: windows, epochs over a smaller corpus) stay remembered.
MAX_ENTRIES = 65_536

_outcomes = BoundedCache("staleness", max_entries=MAX_ENTRIES)


def is_remote(path: str) -> bool:
    """Whether checking ``path`` costs a request: a URL, or a member of a container at a URL.

    >>> is_remote("s3://bucket/a.wav"), is_remote("/data/a.wav"), is_remote("tar://a.wav::/data/shard.tar")
    (True, False, False)
    """
    from audiotree.io import members, storage

    return storage.is_url(members.container_of(path) or path)


def stat_of(path: str) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of ``path`` as the index records them, or ``None`` when it cannot be looked up."""
    from audiotree.io.members import member_stat

    try:
        return member_stat(path)
    except (OSError, AudioReadError):
        return None


def change_reason(now: tuple[int, int] | None, size: int, mtime_ns: int, *, remote: bool = False) -> str | None:
    """Why a file whose lookup gave ``now`` (``(size, mtime_ns)``; ``None``: not found) differs from its row.

    ``remote``: the times are a remote object's, which carry its version tag
    (:func:`audiotree.io.storage.same_version`; a row recorded before that is
    compared by the store's time alone).

    >>> change_reason((10, 5), 10, 5) is None, change_reason(None, 10, 5), change_reason((10, 6), 10, 5)
    (True, 'it no longer exists', 'its modification time changed')
    """
    if now is None:
        return "it no longer exists"
    now_size, now_mtime = now
    if now_size != size:
        return f"its size changed from {size} to {now_size} bytes"
    if now_mtime != mtime_ns:
        from audiotree.io import storage

        if not remote:
            return "its modification time changed"
        if not storage.same_version(now_mtime, mtime_ns):
            return "its modification time or version (ETag, generation) changed"
    return None


def stale_reason(path: str, size: int, mtime_ns: int) -> str | None:
    """Why ``path`` no longer matches its row's ``size``/``mtime_ns``, or ``None`` when it does.

    A local file is looked up on every call; a remote one once per process for
    these expected values (see the module docstring). Thread-safe.
    """
    if not is_remote(path):
        return change_reason(stat_of(path), size, mtime_ns)
    key = (path, int(size), int(mtime_ns))
    kept = _outcomes.get(key, MISSING)
    if kept is not MISSING:
        return kept
    now = stat_of(path)
    reason = change_reason(now, size, mtime_ns, remote=True)
    if now is not None:  # a failed lookup is asked again next time
        _outcomes.put(key, reason)
    return reason


def entries() -> int:
    """How many remote files this process remembers."""
    return len(_outcomes)


def clear() -> None:
    """Forgets every remembered check, so the next item of each remote file asks the storage again.

    For a long-lived process (a notebook) after objects were replaced without
    rebuilding the index.
    """
    _outcomes.clear()

"""The byte layer's reader of one object: bytes ``[lo, hi)`` and the size of a local file or a remote object.

- :func:`read_bytes` reads a range of a local file (one ``pread``) or of a
  remote object (one checked ranged GET, :func:`audiotree.io.ranged_get.read_range`,
  retried by :func:`audiotree.io.storage.retry`);
- :func:`read_span` reads a span of a path or of a file object a decoder holds
  (a negative offset counts from the end), giving the object its position back;
- :func:`file_size` is the size of a local file or a remote object (defined in
  :mod:`audiotree.io.storage` with the other metadata lookups: ``stat``,
  ``version``; re-exported here).

Container members (tar members, Parquet cells) sit above this module: their
bytes and sizes are :mod:`audiotree.io.item_bytes`'s, which resolves a member
to a range of its container and reads it here.

Remote requests are counted in :mod:`audiotree.io.byte_counters`; caches of
what was read are :class:`audiotree.io.byte_cache.BoundedCache`.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "a.bin")
>>> with open(path, "wb") as f:
...     _ = f.write(b"0123456789")
>>> read_bytes(path, 2, 5), read_bytes(path, 8, None), read_span(path, -3, 2), file_size(path)
(b'234', b'89', b'78', 10)
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from audiotree.io import ranged_get, storage
from audiotree.io.storage import file_size
from audiotree.io.byte_paths import is_url, local_path

__all__ = ["read_bytes", "read_span", "file_size"]


def read_bytes(path: str | os.PathLike, lo: int, hi: int | None, *,
               storage_options: Mapping[str, Any] | None = None) -> bytes:
    """Bytes ``[lo, hi)`` of a local file or a remote object (``hi=None``: to the end); short only where it ends.

    A member URL is read by :func:`audiotree.io.item_bytes.read_item_bytes`.

    Raises:
      OSError: a local file cannot be opened (as ``open``).
      AudioReadError: a remote object cannot be read (names it and the status).
    """
    path = os.fsdecode(path)
    lo = int(lo)
    if hi is not None and int(hi) <= lo:
        return b""
    if is_url(path):
        fs = storage.filesystem(path, storage_options)
        if hi is None and lo == 0:
            return storage.retry(lambda: ranged_get.get_whole(fs, path), path, "read", storage_options)
        if hi is None:
            hi = file_size(path, storage_options=storage_options)
        return ranged_get.read_range(fs, path, lo, int(hi), storage_options)
    fd = os.open(local_path(path), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if hi is None:
            hi = os.fstat(fd).st_size
        return os.pread(fd, max(0, int(hi) - lo), lo)
    finally:
        os.close(fd)


def read_span(source: Any, offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset`` (negative: from the end) of a local path or an open file object.

    A file object shared with a decoder gets its position back, so the
    decoder's own bookkeeping stays right.
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            return read_span(fh, offset, count)
    saved = source.tell()
    try:
        size = source.seek(0, os.SEEK_END)
        source.seek(max(0, size + offset) if offset < 0 else offset)
        return source.read(count)
    finally:
        source.seek(saved)

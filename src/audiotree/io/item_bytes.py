"""Bytes and size of any item name: a local path, a URL, or a container member (tar member, Parquet cell).

The front of the byte layer for callers that hold an item's name: a member
with a recorded range (``tar://NAME?offset=O&size=N::SHARD``, or a Parquet row
whose index recorded its cell, ``parquet://...&offset=O&size=N::FILE``) is that
range of its container, read by :func:`audiotree.io.byte_reads.read_bytes` like
any file; other members (found by listing their shard, Parquet rows without a
range) are read through :func:`audiotree.io.members.open_member`. Paths and URLs go straight to
:mod:`audiotree.io.byte_reads`.

>>> import os, tempfile
>>> from audiotree.io.members import tar_url
>>> path = os.path.join(tempfile.mkdtemp(), "s.tar")
>>> with open(path, "wb") as f:
...     _ = f.write(b"headerAUDIOtail")
>>> member = tar_url(path, "a.wav", 6, 5)
>>> read_item_bytes(member, 1, 3), read_item_bytes(member, 2, None), item_size(member), item_size(path)
(b'UD', b'DIO', 5, 15)
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from audiotree.io import byte_reads, members, storage

__all__ = ["read_item_bytes", "item_size"]


def read_item_bytes(path: str | os.PathLike, lo: int, hi: int | None, *,
                    storage_options: Mapping[str, Any] | None = None) -> bytes:
    """Bytes ``[lo, hi)`` of the item ``path`` (``hi=None``: to its end); short only where it ends.

    Raises:
      OSError: a local file cannot be opened.
      AudioReadError: a remote object or a member cannot be read (names it).
    """
    path = os.fsdecode(path)
    if not members.is_member(path):
        return byte_reads.read_bytes(path, lo, hi, storage_options=storage_options)
    lo = int(lo)
    if hi is not None and int(hi) <= lo:
        return b""
    span = members.recorded_span(path)
    if span is None:  # a member whose range a listing gives, or a Parquet row without a recorded cell
        with storage.use_storage_options(storage_options), members.open_member(path) as f:
            f.seek(lo)
            return f.read(-1 if hi is None else int(hi) - lo)
    container, base, length = span
    stop = length if hi is None else min(int(hi), length)
    return byte_reads.read_bytes(container, base + lo, base + max(lo, stop), storage_options=storage_options)


def item_size(path: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None,
              or_none: bool = False) -> int | None:
    """Size in bytes of the item ``path``: a local file, a remote object, or a member (its own bytes).

    Raises ``OSError`` (an :class:`~audiotree.errors.AudioReadError` for a URL or member), or gives ``None`` with
    ``or_none=True`` (for a message that only mentions the size).
    """
    path = os.fsdecode(path)
    try:
        if members.is_member(path):
            return members.member_stat(path, storage_options=storage_options)[0]
        return byte_reads.file_size(path, storage_options=storage_options)
    except OSError:
        if or_none:
            return None
        raise

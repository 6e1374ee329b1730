"""A per-process memo of the open-time integrity checks, keyed by what identifies a file's bytes.

Every excerpt read opens its file, and opening checks the header's claims against
the bytes (:mod:`audiotree.io.integrity`): the final page of an Ogg stream, the
head of an MP3, the ``data`` chunk of a WAV. A data loader reopens the same files
thousands of times; once a file has passed, the same bytes pass again. The memo
remembers a pass per ``(path, size, mtime_ns, inode, device)`` of a local file and
the header values the checks judged (format, frames, rate, channels), so a file
rewritten in place, even with the same size, is checked again. It also remembers
what the checks set on the reader (``length_slack``). Failures are never
remembered: a bad file is refused, with its full message, every time.

Remote files (URLs) are always checked: an object's size says nothing of a rewrite.
The memo holds at most :data:`MAX_ENTRIES` files (least recently used dropped) and
is safe under threads; a forked worker inherits it (the same files, still valid).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from audiotree.io.byte_cache import BoundedCache

__all__ = ["MAX_ENTRIES", "checked_once", "clear"]

MAX_ENTRIES = 65_536  # ~150 bytes each

_passed = BoundedCache("open_checks", max_entries=MAX_ENTRIES)


def _key(path: str, size: int | None, reader: Any) -> tuple | None:
    if size is None or "://" in path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_size != size:  # changed between the open and now: check it
        return None
    info = reader.info
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, type(reader).__name__,
            info.format, info.subtype, info.frames, info.sample_rate, info.channels)


def checked_once(path: str, size: int | None, reader: Any, check: Callable[[], None]) -> None:
    """Runs ``check()`` unless this file, unchanged, already passed it in this process."""
    key = _key(path, size, reader)
    if key is not None:
        slack = _passed.get(key)
        if slack is not None:
            reader.length_slack = slack
            return
    check()
    if key is not None:
        _passed.put(key, getattr(reader, "length_slack", 0))


def clear() -> None:
    """Forgets every pass (tests; or after rewriting files within one mtime tick)."""
    _passed.clear()

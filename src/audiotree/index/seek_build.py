"""A FLAC, MP3 or Ogg Vorbis file's seek points at index time: which bytes a build reads for them, and the open
that reuses them.

What the index's ``seek_points`` column holds and how readers use it is in
:mod:`audiotree.index.table_schema` ("FLAC seek points"). Here:

* a build with loudness decodes every sample anyway, so :func:`open_for_build`
  reads the whole file's bytes first (a local read; one GET for a URL; the
  member's range of its shard), scans its frame headers
  (:func:`audiotree.io.flac_seek_points.seek_points`) and, for a remote file, decodes
  the profile from those same bytes (:meth:`audiotree.io.AudioFile.from_bytes`),
  so the object crosses the network once; an MP3's table
  (:func:`audiotree.io.mpeg_seek_points.seek_points`) and an Ogg Vorbis file's
  (:func:`audiotree.io.ogg_seek_points.seek_points`) are built from the same
  bytes and kept only when excerpts read by them equal the file's own reads;
* a headers-only build (``loudness=False``) reads no audio, so
  :func:`header_points` takes the SEEKTABLE block's points from the header's
  first 64 KiB (one ranged read), or none; an MP3 or Ogg file gets none.

A table is only kept when the bytes read are as many as the file's size when
it was stat'ed for its row: a file that changed in between is stale anyway.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["is_flac", "is_mp3", "is_ogg", "open_for_build", "header_points", "HEADER_BYTES"]

#: Bytes a headers-only build reads for a SEEKTABLE (the metadata blocks sit at the start; cover art may push
#: them further, and then the file gets no table).
HEADER_BYTES = 64 * 1024


def is_flac(path: str) -> bool:
    """Whether ``path`` (a file, URL or tar member) is named as FLAC."""
    from audiotree.io.members import format_name

    return format_name(path).lower().endswith(".flac")


def is_mp3(path: str) -> bool:
    """Whether ``path`` (a file, URL or tar member) is named as MP3."""
    from audiotree.io.members import format_name

    return format_name(path).lower().endswith(".mp3")


def is_ogg(path: str) -> bool:
    """Whether ``path`` (a file, URL or tar member) is named as Ogg Vorbis (``.ogg``, ``.oga``)."""
    from audiotree.io.members import format_name

    return format_name(path).lower().endswith((".ogg", ".oga"))


def _ogg_points(data: bytes, reopen: Callable[[], Any]) -> np.ndarray | None:
    """An Ogg Vorbis file's table from its whole bytes, when excerpts read by it equal the file's own reads."""
    from audiotree.io.ogg_seek_points import differs_from, seek_points

    with reopen() as f:
        if (f.info.format, f.info.subtype) != ("OGG", "VORBIS"):  # (Opus, FLAC in Ogg: no table)
            return None
        points = seek_points(data, f.info.frames)
        # (one handle, excerpts in order: the first seconds decoded through from the start, the rest by seeks)
        return None if differs_from(points, data, f.read) else points


def open_for_build(path: str, size: int, storage_options: dict | None = None) -> tuple[Any, np.ndarray | None]:
    """``(an open AudioFile of path, its seek points or None)`` for a build with loudness.

    A FLAC, MP3 or Ogg file's bytes are read once here; a remote one is decoded from them.
    When they cannot be read (or are not FLAC), the file opens as usual and
    gets no table: its errors are then the usual ones.
    """
    from audiotree.index.freshness import is_remote
    from audiotree.io import AudioFile
    from audiotree.io.flac_seek_points import seek_points
    from audiotree.io.item_bytes import read_item_bytes

    data = points = None
    if is_flac(path) or is_mp3(path) or is_ogg(path):
        try:
            data = read_item_bytes(path, 0, None, storage_options=storage_options)
        except (OSError, ValueError):
            data = None
    whole = data is not None and len(data) == size

    def reopen() -> Any:
        if whole and is_remote(path):
            return AudioFile.from_bytes(path, data)
        return AudioFile(path, storage_options=storage_options)

    if whole and is_flac(path):
        try:
            points = seek_points(data)
        except ValueError:
            points = None
    elif whole:
        from audiotree.errors import AudioReadError
        from audiotree.io.mpeg_seek_points import seek_points as mpeg_seek_points

        try:
            points = mpeg_seek_points(data, reopen) if is_mp3(path) else _ogg_points(data, reopen)
        except (AudioReadError, OSError, ValueError, RuntimeError):  # (the open below reports a bad file)
            points = None
    return reopen(), points


def header_points(path: str, storage_options: dict | None = None) -> np.ndarray | None:
    """The SEEKTABLE points of a FLAC file from its header's first :data:`HEADER_BYTES`, or ``None``."""
    from audiotree.io.flac_seek_points import header_seek_points
    from audiotree.io.item_bytes import read_item_bytes

    if not is_flac(path):
        return None
    try:
        return header_seek_points(read_item_bytes(path, 0, HEADER_BYTES, storage_options=storage_options))
    except (OSError, ValueError):
        return None

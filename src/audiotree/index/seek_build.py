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
  first 64 KiB (one ranged read), or none; an MP3 or Ogg file gets none;
* a WAV or AIFF file, in either build, gets the two-row table of where its
  samples start and end (:func:`pcm_points`,
  :func:`audiotree.io.pcm_layout.data_table`) from its first 64 KiB (one
  ranged read) and, past them, its chunks' 8-byte headers; the read-ahead
  plans an excerpt's bytes by it, libsndfile reads the file as usual.

A table is only kept when the bytes read are as many as the file's size when
it was stat'ed for its row: a file that changed in between is stale anyway.

A Parquet row's audio cell (``parquet://COLUMN?...&offset=O&size=N::FILE``,
:mod:`audiotree.index.cell_ranges`) has no name telling its format, so
:func:`typed_cell` reads its first :data:`HEADER_BYTES` (one ranged read),
sniffs the format from them (:func:`sniff_format`) and names it in the URL
(``...&format=flac``, :func:`audiotree.io.members.with_format`): the cell then
gets its table like a tar member named so, checked against the cell's own byte
count (the row's ``size`` is its Parquet file's).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["is_flac", "is_mp3", "is_ogg", "open_for_build", "header_points", "pcm_points", "sniff_format",
           "typed_cell", "HEADER_BYTES"]

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


def sniff_format(head: bytes) -> str:
    r"""The audio format of a file starting with ``head``, as an extension (``""``: not one a name is given for).

    ``flac``, ``ogg`` (Ogg Vorbis), ``opus`` (Ogg Opus), ``mp3`` (MPEG layer III frames, after any ID3v2 tags;
    a tag running past ``head``, cover art, is taken for MP3's), ``wav``, ``aiff``. Only what the magic bytes say:
    the decoder still checks the file, and an MP3 table is only kept when excerpts read by it equal the file's.

    >>> [sniff_format(h) for h in (b"fLaC\x00\x00\x00\x22", b"RIFF\x24\x00\x00\x00WAVEfmt ", b"\xff\xfb\x90\x64",
    ...                            b"\xff\xf1\x50\x80", b"ID3\x04\x00\x00\x00\x00\x00\x00fLaC", b"")]
    ['flac', 'wav', 'mp3', '', 'flac', '']
    >>> sniff_format(b"ID3\x03\x00\x00\x00\x04\x00\x00APIC")  # (a 64 KiB tag, its first bytes only)
    'mp3'
    """
    while head[:3] == b"ID3" and len(head) >= 10:  # ID3v2 tags (the size is synchsafe; a footer adds 10)
        size = (head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F)
        end = 10 + size + (10 if head[5] & 0x10 else 0)
        if end >= len(head):
            return "mp3"
        head = head[end:]
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"OggS" and len(head) > 27:
        packet = head[27 + head[26]:][:8]  # the first page's first packet: the stream's identification header
        return "ogg" if packet[:7] == b"\x01vorbis" else "opus" if packet == b"OpusHead" else ""
    if len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE6 == 0xE2 and head[2] & 0xF0 != 0xF0:
        return "mp3"  # (frame sync, layer III, a valid bitrate index)
    return ""


def typed_cell(path: str, storage_options: dict | None = None) -> tuple[str, bytes | None]:
    """``(path with its cell's format, the bytes read)`` for a Parquet row with a recorded cell and no format.

    Reads the cell's first :data:`HEADER_BYTES` (one ranged read; :func:`header_points` and
    :func:`open_for_build` take them, the latter reading the whole of a FLAC, MP3 or Ogg cell longer than that,
    as it does a file). Any other path, a cell that cannot be read (the open then reports it) or one whose format
    is not recognised: ``(path, None)``.
    """
    from audiotree.io import members
    from audiotree.io.item_bytes import read_item_bytes

    if not (members.is_member(path) and path.startswith("parquet://")):
        return path, None
    ref = members.parse(path)
    if ref.cell is None or ref.format:
        return path, None
    try:
        data = read_item_bytes(path, 0, HEADER_BYTES, storage_options=storage_options)
    except (OSError, ValueError):  # (AudioReadError is an OSError)
        return path, None
    found = sniff_format(data)
    return (members.with_format(path, found), data) if found else (path, None)


def _ogg_points(data: bytes, reopen: Callable[[], Any]) -> np.ndarray | None:
    """An Ogg Vorbis file's table from its whole bytes, when excerpts read by it equal the file's own reads."""
    from audiotree.io.ogg_seek_points import differs_from, seek_points

    with reopen() as f:
        if (f.info.format, f.info.subtype) != ("OGG", "VORBIS"):  # (Opus, FLAC in Ogg: no table)
            return None
        points = seek_points(data, f.info.frames)
        # (one handle, excerpts in order: the first seconds decoded through from the start, the rest by seeks)
        return None if differs_from(points, data, f.read) else points


def open_for_build(path: str, size: int, storage_options: dict | None = None,
                   data: bytes | None = None) -> tuple[Any, np.ndarray | None]:
    """``(an open AudioFile of path, its seek points or None)`` for a build with loudness.

    A FLAC, MP3 or Ogg file's bytes are read once here (or given: ``data``, a Parquet cell's head from
    :func:`typed_cell`, used when it is the whole cell); a remote one is decoded from them. ``size`` is the row's size (a Parquet cell is checked
    against its own byte count instead). When they cannot be read (or are not FLAC), the file opens as usual and
    gets no table: its errors are then the usual ones.
    """
    from audiotree.index.freshness import is_remote
    from audiotree.io import AudioFile
    from audiotree.io.flac_seek_points import seek_points
    from audiotree.io.item_bytes import read_item_bytes
    from audiotree.io.members import is_member, recorded_span

    points = None
    span = recorded_span(path) if is_member(path) and path.startswith("parquet://") else None
    if span is not None:  # the row's size is the Parquet file's; the cell's bytes are its own
        size = span[2]
    if (data is None or len(data) != size) and (is_flac(path) or is_mp3(path) or is_ogg(path)):
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
    elif whole and (is_mp3(path) or is_ogg(path)):
        from audiotree.errors import AudioReadError
        from audiotree.io.mpeg_seek_points import seek_points as mpeg_seek_points

        try:
            points = mpeg_seek_points(data, reopen) if is_mp3(path) else _ogg_points(data, reopen)
        except (AudioReadError, OSError, ValueError, RuntimeError):  # (the open below reports a bad file)
            points = None
    return reopen(), points


def header_points(path: str, storage_options: dict | None = None, head: bytes | None = None) -> np.ndarray | None:
    """The SEEKTABLE points of a FLAC file from its header's first :data:`HEADER_BYTES` (read here, or ``head``:
    those bytes, read already by :func:`typed_cell`), or ``None``."""
    from audiotree.io.flac_seek_points import header_seek_points
    from audiotree.io.item_bytes import read_item_bytes

    if not is_flac(path):
        return None
    try:
        if head is None:
            head = read_item_bytes(path, 0, HEADER_BYTES, storage_options=storage_options)
        return header_seek_points(head)
    except (OSError, ValueError):
        return None


def pcm_points(path: str, info: Any, size: int, storage_options: dict | None = None,
               head: bytes | None = None) -> np.ndarray | None:
    """A WAV or AIFF file's two-row table (:func:`audiotree.io.pcm_layout.data_table`) checked against ``info``
    (the open file's), from its first :data:`HEADER_BYTES` (read here, or ``head``) and its chunk headers past
    them, or ``None`` (any other format, a tar member or Parquet cell, bytes and frames that disagree)."""
    from audiotree.io.item_bytes import read_item_bytes
    from audiotree.io.members import is_member
    from audiotree.io.pcm_layout import data_table

    if info.format not in ("WAV", "WAVEX", "AIFF") or is_member(path):
        return None

    def more(offset: int, count: int) -> bytes:
        return read_item_bytes(path, offset, offset + count, storage_options=storage_options)

    try:
        if head is None:
            head = more(0, HEADER_BYTES)
        return data_table(head, more, frames=int(info.frames), channels=int(info.channels),
                          subtype=str(info.subtype), container=str(info.format), size=int(size))
    except (OSError, ValueError):
        return None

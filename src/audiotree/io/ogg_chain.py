"""Chained Ogg files: several complete streams one after another, read as one.

``cat a.ogg b.ogg > ab.ogg`` is a valid Ogg file (a *chain* of two links;
internet radio dumps and some encoders write them). libsndfile decodes only
the first link and reports its length, so the rest of the file was silently
lost. Here every link is opened as its own file (a byte-range view of the
file, see :class:`~audiotree.io.byte_range.MemberInput`) with libsndfile, each
is checked like any Ogg file, and :class:`ChainedOggReader` reads across them:
frame ``k`` of the chain is frame ``k - first`` of the link holding it, so
excerpts stay sample-exact within each link (a link starts its own decoder;
this is what FFmpeg's decode of the file gives too).

The links must share one sample rate and channel count; a chain that changes
them is refused with an :class:`~audiotree.errors.AudioReadError` saying how to
convert it.

Finding the links reads the whole file (page headers only; see
:func:`audiotree.io.ogg_pages.link_spans`), so it is done only when a cheap
test says the file may be chained: its last page belongs to another stream
than its first, or a beginning-of-stream page appears among its last pages.
For a local file the answer is kept per path, size and mtime.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from audiotree.io import ogg_pages
from audiotree.io.byte_range import MemberInput
from audiotree.io.byte_reads import read_span
from audiotree.io.read_errors import bad_file, describe
from audiotree.io.info import AudioInfo
from audiotree.io.soundfile_reader import SoundfileReader
from audiotree.io.byte_cache import memoized

__all__ = ["ChainedOggReader", "chain_links", "reopen_if_chained"]

# Bytes read from the end of the file by the cheap test (the last pages).
_TAIL_BYTES = 1 << 16


def _may_be_chained(source: Any) -> bool:
    found = ogg_pages.first_page_info(read_span(source, 0, 4096))
    if found is None:
        return False
    tail = read_span(source, -_TAIL_BYTES, _TAIL_BYTES)
    size = _size(source)
    pages = ogg_pages.pages_in(tail, max(0, size - len(tail)))
    if not pages:
        return False
    return pages[-1].serial != found[0] or any(p.flags & 0x02 and p.offset > 0 for p in pages)


def _size(source: Any) -> int:
    if isinstance(source, str):
        return os.path.getsize(source)
    saved = source.tell()
    try:
        return source.seek(0, os.SEEK_END)
    finally:
        source.seek(saved)


def _links(source: Any) -> list[tuple[int, int]] | None:
    if not _may_be_chained(source):
        return None
    spans = ogg_pages.link_spans(source)
    return spans if len(spans) > 1 else None


@memoized("ogg_chain_links", max_entries=1024)
def _local_links(path: str, size: int, mtime_ns: int) -> list[tuple[int, int]] | None:
    return _links(path)


def chain_links(source: Any) -> list[tuple[int, int]] | None:
    """Byte spans of the links of a chained Ogg file (a path or an open file object), or None for one stream."""
    if isinstance(source, str):
        st = os.stat(source)
        return _local_links(source, st.st_size, st.st_mtime_ns)
    return _links(source)


class ChainedOggReader:
    """The links of a chained Ogg file, each a :class:`SoundfileReader`, read as one stream.

    ``open_link(offset, size)`` returns the file object of one link (a
    byte-range view, owned and closed by its reader); ``check(reader, size)``
    runs the open-time checks of one link.
    """

    backend = "soundfile"

    __slots__ = ("path", "info", "source", "preroll", "length_slack", "_links", "_starts")

    def __init__(self, path: str, spans: list[tuple[int, int]], open_link: Callable[[int, int], Any],
                 check: Callable[[SoundfileReader, int], None]) -> None:
        self.path = path
        self._links: list[SoundfileReader] = []
        try:
            for n, (offset, end) in enumerate(spans, 1):
                link = open_link(offset, end - offset)
                try:
                    reader = SoundfileReader(path, link)
                except Exception as exc:
                    link.close()
                    raise bad_file(path, f"link {n} of its {len(spans)} chained Ogg streams (bytes {offset}-{end}) "
                                   f"cannot be opened ({describe(exc)}); it is damaged") from exc
                self._links.append(reader)
                check(reader, end - offset)
            first = self._links[0].info
            for n, reader in enumerate(self._links[1:], 2):
                info = reader.info
                if (info.sample_rate, info.channels) != (first.sample_rate, first.channels):
                    raise bad_file(path, f"it is a chained Ogg file whose link {n} has {info.sample_rate} Hz and "
                                   f"{info.channels} channels but link 1 has {first.sample_rate} Hz and "
                                   f"{first.channels}; convert it into one stream (e.g. `ffmpeg -i IN -ar "
                                   f"{first.sample_rate} -ac {first.channels} OUT.flac`)")
        except BaseException:
            self.close()
            raise
        starts = [0]
        for reader in self._links:
            starts.append(starts[-1] + reader.info.frames)
        self._starts = starts
        self.info = AudioInfo(path, starts[-1], first.sample_rate, first.channels, first.format, first.subtype)
        self.source = self._links[0].source
        self.preroll = 0
        self.length_slack = 0

    def close(self) -> None:
        for reader in self._links:
            reader.close()

    def read(self, start: int, count: int) -> np.ndarray:
        parts, end = [], start + count
        for n, reader in enumerate(self._links):
            first, last = self._starts[n], self._starts[n + 1]
            if end <= first or start >= last:
                continue
            lo, hi = max(start, first) - first, min(end, last) - first
            x = reader.read(lo, hi - lo)
            if not isinstance(reader.source, str):
                reader.source.check()
            if len(x) != hi - lo:
                raise bad_file(self.path, f"decoding link {n + 1} of the chained Ogg file stopped at its frame "
                               f"{lo + len(x)} but its header promises {last - first}; it is truncated or corrupt")
            parts.append(x)
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return np.empty((0, self.info.channels), dtype=np.float32)
        return np.concatenate(parts)


def reopen_if_chained(path: str, reader: SoundfileReader, source: Callable[[], Any],
                      check: Callable[[SoundfileReader, int], None]) -> SoundfileReader | ChainedOggReader:
    """``reader`` (an Ogg file just opened), or, when the file is chained, a :class:`ChainedOggReader` of it.

    ``source()`` returns a fresh handle of a remote file (unused for a local
    path); ``check(reader, size)`` runs the open-time checks of each link.
    ``reader`` is closed when it is replaced.
    """
    try:
        spans = chain_links(reader.source)
    except OSError:  # the file vanished: the first read will say so
        return reader
    if spans is None:
        return reader
    local = isinstance(reader.source, str)
    reader.close()

    def open_link(offset: int, size: int) -> MemberInput:
        handle = os.open(path, os.O_RDONLY) if local else source()
        return MemberInput(path, handle, offset, size)

    return ChainedOggReader(path, spans, open_link, check)

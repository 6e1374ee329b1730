"""Ogg pages: their CRC, and checks that no page of an excerpt was damaged or lost.

libogg verifies each page's CRC and *drops* a page that fails it, without
telling libsndfile. The decoder then joins the packets on either side: the file
reads as shorter and everything after the hole moves earlier (a bit flipped in
page 2's CRC field made a 33,075-frame Vorbis file read as 17,587 frames). FFmpeg
does not check the CRC at all. So the pages a read decodes are checked here:

* :func:`page_crc` is the Ogg CRC-32 (polynomial ``0x04C11DB7``, not
  reflected, initial value 0, no final XOR). It is computed with
  :func:`zlib.crc32` (the reflected CRC of the same polynomial) over the
  bit-reversed bytes, which runs in C (about 1.4 ms per MB).
* :func:`span_problem` finds the page where decoding of a frame span starts
  (an interpolation search on granule positions: a few 16 KiB probes) and walks
  the pages forward until the span is covered. Each page must start where the
  previous one ended, pass its CRC, carry the next sequence number of its
  stream and a granule position that does not go backwards. A read costs its
  own bytes plus a few probes, never a scan of the whole file.
* :func:`tail_problem` checks the final pages, read once when a file is
  opened: an end-of-stream page, valid CRCs and a final granule position that
  is not below the previous page's (a header cut to claim less than the file
  holds).
* :func:`head_problem` checks the first pages the same way, and that the
  first audio packets are big enough for the channel count the Vorbis header
  claims (each channel of a packet costs at least one bit).

Every problem is returned as a sentence naming the page (its sequence number
in its stream, and its byte offset) for the caller to raise. Pure functions of
the file's bytes.

>>> hex(page_crc(b"OggS" + bytes(23)))
'0x9ea1a511'
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Iterator, NamedTuple

__all__ = ["OGG_MAX_PAGE", "Page", "page_crc", "head_problem", "tail_problem", "span_problem", "first_page_info",
           "pages_in", "chained_pages", "link_spans"]

#: Largest possible Ogg page: 27-byte header + 255 lacing values + 255 * 255 body bytes.
OGG_MAX_PAGE = 27 + 255 + 255 * 255

_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))
_PROBE = 16 * 1024  # bytes read per search probe
_MAX_PROBES = 48


def _reverse32(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


def page_crc(page: bytes) -> int:
    """The Ogg CRC-32 of one whole page, computed as if its CRC field (bytes 22-25) were zero."""
    crc = zlib.crc32(page[:22].translate(_REVERSED_BITS), 0xFFFFFFFF)
    crc = zlib.crc32(b"\0\0\0\0", crc)
    crc = zlib.crc32(page[26:].translate(_REVERSED_BITS), crc)
    return _reverse32(crc ^ 0xFFFFFFFF)


class Page(NamedTuple):
    """One Ogg page header: byte span, flags, granule position, stream serial and sequence number."""

    offset: int
    end: int
    flags: int
    granule: int
    serial: int
    sequence: int
    crc_ok: bool
    lacing: bytes


def _parse(buf: bytes, i: int, base: int) -> Page | None:
    """The page starting at ``buf[i]`` (file offset ``base + i``) if all of it is in ``buf``, else None."""
    if buf[i : i + 4] != b"OggS" or i + 27 > len(buf) or buf[i + 4] != 0:
        return None
    body = i + 27 + buf[i + 26]
    if body > len(buf):
        return None
    lacing = buf[i + 27 : body]
    end = body + sum(lacing)
    if end > len(buf):
        return None
    granule, serial, sequence, stored = struct.unpack_from("<qIII", buf, i + 6)
    return Page(base + i, base + end, buf[i + 5], granule, serial, sequence, page_crc(buf[i:end]) == stored, lacing)


def _name(page: Page) -> str:
    return f"page {page.sequence} (at byte {page.offset})"


def _page_problem(page: Page, previous: dict[int, Page]) -> str | None:
    """What is wrong with ``page`` given the previous page of each stream (updated), or None."""
    if not page.crc_ok:
        return f"Ogg {_name(page)} fails its CRC check (damaged; a decoder would silently drop it)"
    before = previous.get(page.serial)
    previous[page.serial] = page
    if before is None:
        return None
    if page.sequence != (before.sequence + 1) & 0xFFFFFFFF:
        return (f"Ogg page {before.sequence + 1} is missing or damaged: {_name(page)} follows page "
                f"{before.sequence} of its stream")
    if page.granule != -1 and before.granule != -1 and page.granule < before.granule:
        return (f"Ogg {_name(page)} has granule position {page.granule}, below the {before.granule} of the page "
                "before it; the stream is corrupt")
    return None


def _pages_in(buf: bytes, base: int) -> Iterator[Page]:
    """Every whole page found in ``buf`` by its capture pattern (CRC-valid or not), in order."""
    i = buf.find(b"OggS")
    while i >= 0:
        page = _parse(buf, i, base)
        if page is not None:
            yield page
        i = buf.find(b"OggS", i + 1)


def pages_in(buf: bytes, base: int = 0) -> list[Page]:
    """Every whole, CRC-valid page in ``buf`` (file offset ``base``), in order."""
    return [page for page in _pages_in(buf, base) if page.crc_ok]


def chained_pages(buf: bytes, base: int = 0, *, stop_at_cut: bool = False) -> tuple[list[Page], str | None]:
    """The pages back to back from ``buf[0]`` (file offset ``base``), and the first problem met, or None.

    Each page must pass its CRC and follow the previous page of its stream
    (sequence number, granule position; see :func:`span_problem`). The walk
    stops at the first problem, or where ``buf`` ends; bytes left that are not
    a whole page are a problem, unless ``stop_at_cut`` and they are the start
    of one (a prefix of a file).
    """
    pages: list[Page] = []
    previous: dict[int, Page] = {}
    offset = 0
    while offset < len(buf):
        page = _parse(buf, offset, base)
        if page is None:
            if stop_at_cut and buf[offset:offset + 4] == b"OggS"[:len(buf) - offset]:
                return pages, None
            return pages, f"the bytes at offset {base + offset} are not a whole Ogg page"
        problem = _page_problem(page, previous)
        if problem:
            return pages, problem
        pages.append(page)
        offset = page.end - base
    return pages, None


def first_page_info(head: bytes) -> tuple[int, bytes] | None:
    """(serial, first packet) of the file's first page, if ``head`` holds a whole valid one."""
    page = _parse(head, 0, 0)
    if page is None or not page.crc_ok:
        return None
    body = 27 + len(page.lacing)
    return page.serial, head[body : body + page.lacing[0] if page.lacing else body]


def _packets(pages: list[Page], buf: bytes, serial: int) -> Iterator[int]:
    """Sizes of the packets that complete on ``pages`` of stream ``serial``, in order (from the stream start)."""
    size = 0
    for page in pages:
        if page.serial != serial:
            continue
        for value in page.lacing:
            size += value
            if value < 255:
                yield size
                size = 0


def head_problem(head: bytes, channels: int, codec: str | None) -> str | None:
    """Damage in the first pages of an Ogg file (``head``: its first bytes), or None.

    Checks the CRC and order of every page that chains from offset 0 inside
    ``head``, and for Vorbis that no audio packet among them is too short for
    ``channels`` (every channel's floor takes at least one bit; an empty
    packet is legal and skipped).
    """
    pages, previous, offset = [], {}, 0
    while True:
        page = _parse(head, offset, 0)
        if page is None:
            break
        problem = _page_problem(page, previous)
        if problem:
            return problem
        pages.append(page)
        offset = page.end
    if not pages or codec != "VORBIS":
        return None
    need = (1 + channels + 7) // 8  # packet type bit + one floor bit per channel
    for n, size in enumerate(_packets(pages, head, pages[0].serial)):
        if n >= 3 and 0 < size < need:  # after the three header packets
            return (f"its Vorbis header claims {channels} channels, but audio packet {n - 3} has only {size} bytes, "
                    f"less than the {need} bytes that many channels need; the header is corrupt")
    return None


def tail_problem(tail: bytes, base: int = 0) -> str | None:
    """Damage in the last pages of an Ogg file (``tail``: its bytes from offset ``base`` to the end), or None.

    The last whole page must be flagged end-of-stream and not be followed by a
    cut page (a file cut anywhere ends inside a page or after a page without
    that flag; bytes after it that start no page, such as a tag some tools
    append, are ignored). The pages that chain back-to-back before it must pass
    their CRC, and the final granule position must not be below the previous
    page's: a last page rewritten to claim less than the file holds.
    """
    by_end = {}
    for page in _pages_in(tail, base):
        by_end.setdefault(page.end, page)
    last = None
    i = tail.rfind(b"OggS")
    while i >= 0 and last is None:
        page = _parse(tail, i, base)
        if page is not None:
            last = page
        i = tail.rfind(b"OggS", 0, i)
    if last is None or not last.flags & 0x04 or tail[last.end - base :].startswith(b"OggS"):
        return "the file is truncated: its Ogg stream ends without an end-of-stream page"
    chain = [last]
    while chain[-1].offset in by_end:
        chain.append(by_end[chain[-1].offset])
    previous: dict[int, Page] = {}
    for page in reversed(chain):
        problem = _page_problem(page, previous)
        if problem:
            return problem
    return None


class _Reader:
    """Buffered reads of a path or an open file object (whose position is restored)."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self._fh = open(source, "rb") if isinstance(source, str) else None  # noqa: SIM115 - closed by close()
        handle = self._fh or source
        self._saved = None if self._fh else handle.tell()
        self.size = handle.seek(0, os.SEEK_END)

    def read(self, offset: int, count: int) -> bytes:
        handle = self._fh or self._source
        handle.seek(offset)
        return handle.read(count)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        else:
            self._source.seek(self._saved)


def _first_page_from(reader: _Reader, offset: int, serial: int) -> Page | None:
    """The first CRC-valid page of stream ``serial`` with a granule position starting at or after ``offset``."""
    while offset < reader.size:
        buf = reader.read(offset, _PROBE + OGG_MAX_PAGE)
        for page in _pages_in(buf, offset):
            if page.offset - offset >= _PROBE:
                break
            if page.crc_ok and page.serial == serial and page.granule != -1:
                return page
        if len(buf) < _PROBE:
            return None
        offset += _PROBE
    return None


def _locate(reader: _Reader, serial: int, target: int, total: int | None) -> int:
    """Byte offset of a page that starts before every page holding granules >= ``target`` (0 at worst).

    An interpolation search on (offset, granule), alternating with plain
    bisection so that it always converges; probes that find no usable page
    only narrow the bracket. Damaged pages are skipped here; the walk that
    follows from the returned offset meets them.
    """
    lo_off, lo_granule = 0, 0
    hi_off, hi_granule = reader.size, total
    for step in range(_MAX_PROBES):
        if hi_off - lo_off <= 4 * _PROBE:
            break
        if step % 2 == 0 and hi_granule is not None and hi_granule > lo_granule:
            guess = lo_off + (hi_off - lo_off) * (target - lo_granule) // (hi_granule - lo_granule) - _PROBE
        else:
            guess = (lo_off + hi_off) // 2
        mid = min(max(guess, lo_off + 1), hi_off - _PROBE)
        page = _first_page_from(reader, mid, serial)
        if page is None or page.offset >= hi_off:
            hi_off = mid
        elif page.granule < target:
            lo_off, lo_granule = page.offset, page.granule
        else:
            hi_off, hi_granule = mid, page.granule
    return lo_off


def span_problem(source: Any, serial: int, first: int, last: int, total: int | None = None) -> str | None:
    """Damage in the pages a decoder reads to produce granules ``first`` to ``last``, or None.

    ``source`` is the path or the open file object; ``serial`` the audio
    stream's serial number (see :func:`first_page_info`); ``first`` and
    ``last`` are granule positions (samples for Vorbis, 48 kHz samples
    including the pre-skip for Opus), ``last=None`` meaning the end of the
    file; ``total`` is the final granule position, when known, to speed up
    the search. Reads from a page before ``first`` to the first page of the
    stream whose granule position reaches ``last``.
    """
    reader = _Reader(source)
    try:
        offset = _locate(reader, serial, first, total) if first > 0 else 0
        previous: dict[int, Page] = {}
        buf, base = b"", offset
        while offset < reader.size:
            i = offset - base
            page = _parse(buf, i, base)
            if page is None:  # not all of it is buffered yet
                buf, base = reader.read(offset, max(_PROBE * 4, OGG_MAX_PAGE)), offset
                page = _parse(buf, 0, base)
                if page is None:
                    expected = previous.get(serial)
                    which = f"page {expected.sequence + 1}" if expected is not None else "a page"
                    return (f"the bytes at offset {offset} are not a whole Ogg page (expected {which} of the stream); "
                            "the file is damaged")
            problem = _page_problem(page, previous)
            if problem:
                return problem
            offset = page.end
            if page.serial == serial and (page.flags & 0x04 or (last is not None and page.granule >= last)):
                break  # the span is covered, or the stream ended (a tag may follow)
        return None
    finally:
        reader.close()


_WALK_BLOCK = 1 << 20  # bytes read at a time by link_spans


def link_spans(source: Any) -> list[tuple[int, int]]:
    """Byte spans ``[start, end)`` of the links of a chained Ogg file (streams one after another).

    A link starts at a beginning-of-stream page that follows a page which is
    not one (the beginning-of-stream pages of streams multiplexed together
    come first, together, and make one link). Walks every page header of the
    file (reads the whole file, in 1 MiB blocks); the walk stops at bytes that
    are not a page, and the last link runs to the end of the file.
    """
    reader = _Reader(source)
    try:
        starts, offset, in_bos_group = [], 0, False
        buf, base = b"", 0
        while offset < reader.size:
            i = offset - base
            if i + 27 > len(buf) or i + 27 + buf[i + 26] > len(buf):
                buf, base, i = reader.read(offset, _WALK_BLOCK), offset, 0
                if len(buf) < 27 or i + 27 + buf[26] > len(buf):
                    break
            if buf[i : i + 4] != b"OggS":
                break
            lacing_end = i + 27 + buf[i + 26]
            bos = bool(buf[i + 5] & 0x02)
            if bos and not in_bos_group:
                starts.append(offset)
            in_bos_group = bos
            offset += lacing_end - i + sum(buf[i + 27 : lacing_end])
        ends = starts[1:] + [reader.size]
        return list(zip(starts, ends))
    finally:
        reader.close()

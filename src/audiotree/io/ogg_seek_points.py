"""Ogg Vorbis seek points: where each half second of a Vorbis file's pages start, so a remote excerpt is one read.

libsndfile seeks in an Ogg file by bisection over page granule positions:
through a remote file each probe is a request, and the probes land far from
the excerpt. Knowing, for pages spread over the file, the byte offset of the
page and the first sample it completes, an excerpt needs only the header pages
(the same for every excerpt, fetched once per process) and the pages from a
little before the excerpt to the one that completes its last sample: one
ranged read. Those bytes, put after the header pages, are themselves an Ogg
Vorbis file, which libsndfile (the decoder of the local read) decodes in
memory; its samples map back to the file's by granule position.

The table (:func:`seek_points`) is ``int64 (K, 2)``, rows ``[granule, byte
offset]``:

* a row's granule is the **first sample its page completes** (the previous
  page's granule position), in the stream's granule units (samples; a stream
  that does not start at 0 keeps its own numbering);
* row 0 is the first audio page (right after the three header packets' pages,
  whose bytes are ``[0, points[0, 1])``); its granule is the stream's first
  sample, so a local read's frame ``f`` is granule ``f + points[0, 0]``;
* then about one row every ``every`` seconds, never the final page (libsndfile
  cannot place itself when decoding starts on the last page, whose granule
  position is cut to the stream's length);
* the last row is ``[final granule position, byte after the last page]``: the
  file has ``points[-1, 0] - points[0, 0]`` frames.

Why the samples are exactly the local read's: Vorbis decodes each sample from
the two blocks that overlap there, whatever came before, and libsndfile finds
where its output starts from the first page it decodes (the page's granule
position less the samples its packets complete), as it does after each of its
own seeks. Decoding from a page whose first completed sample is at least one
long block (read from the header) before the excerpt leaves room for a packet
continued from the page before (dropped) and the packet that primes the
decoder. The index build checks it on each file anyway, start, middle and end
(:func:`audiotree.index.seek_build.open_for_build`), and keeps no table for a
file where they differ.

Only plain files get a table (:func:`seek_points` raises ``ValueError``
otherwise; the file is read as before): one Vorbis stream, pages back to back
from byte 0 to the end-of-stream page, each passing its CRC, in sequence, with
no bytes after the last. A chained or multiplexed file, Opus, or a damaged
file gets none.

>>> import io, numpy as np, soundfile
>>> buf = io.BytesIO()
>>> soundfile.write(buf, np.zeros((8000 * 4, 1), np.float32), 8000, format="OGG", subtype="VORBIS")
>>> points = seek_points(buf.getvalue())
>>> int(points[0, 0]), int(points[-1, 0]), int(points[-1, 1]) == len(buf.getvalue())
(0, 32000, True)
"""

from __future__ import annotations

import io
import struct
from typing import Callable, NamedTuple

import numpy as np

from audiotree.io import ogg_pages

__all__ = ["SEEK_EVERY", "MAX_BLOCK", "VorbisHeader", "vorbis_header", "seek_points", "read_span", "planned_ranges",
           "read_excerpt", "differs_from"]

#: Seconds between seek points.
SEEK_EVERY = 0.5

#: Vorbis I's longest block (samples): what a plan, which has no header, assumes the decoder needs before an excerpt.
MAX_BLOCK = 8192


class VorbisHeader(NamedTuple):
    """What a Vorbis file's header pages say: their length in bytes, the stream's serial, rate, channels and long
    block size (samples)."""

    length: int
    serial: int
    rate: int
    channels: int
    long_block: int


def vorbis_header(data: bytes) -> VorbisHeader:
    """The header of an Ogg Vorbis file from its first bytes (at least its header pages).

    The three header packets must be the stream's only packets on its first
    pages, and end the last of them (Vorbis I requires audio to start a fresh
    page). ``ValueError`` otherwise, or for bytes that are not Ogg Vorbis.
    """
    first = ogg_pages.first_page_info(data)
    if first is None:
        raise ValueError("no whole, valid Ogg page at byte 0")
    serial, ident = first
    if ident[:7] != b"\x01vorbis" or len(ident) < 30:
        raise ValueError("the first Ogg packet is not a Vorbis identification header")
    channels, rate = ident[11], struct.unpack_from("<I", ident, 12)[0]
    long_block = 1 << (ident[28] >> 4)
    span = 1 << 16
    while True:  # (the header pages of a whole file: read from its first 64 KiB, more only if they are longer)
        pages, problem = ogg_pages.chained_pages(data[:span], 0, stop_at_cut=True)
        packets, partial = 0, False
        for page in pages:
            if page.serial != serial or (page.flags & 0x02 and page.offset > 0):
                raise ValueError(f"the Ogg page at byte {page.offset} belongs to another stream (a multiplexed file)")
            for value in page.lacing:
                partial = value == 255
                packets += not partial
            if packets >= 3:
                if packets > 3 or partial:
                    raise ValueError("audio packets share the last header page")
                if not rate or not channels:
                    raise ValueError("the Vorbis header says 0 Hz or 0 channels")
                return VorbisHeader(page.end, serial, rate, channels, long_block)
        if problem or span >= len(data):
            raise ValueError(problem or "the bytes given end inside the Vorbis header pages")
        span *= 4


def seek_points(data: bytes, frames: int | None = None, *, every: float = SEEK_EVERY) -> np.ndarray:
    """``int64 (K, 2)`` rows ``[granule, byte offset]`` of a whole Ogg Vorbis file (see the module docstring).

    ``frames`` is the file's length as libsndfile reads it (its final granule
    position less the stream's first sample); ``None`` asks libsndfile. Raises
    ``ValueError`` saying why the file gets no table.
    """
    head = vorbis_header(data)
    pages, problem = ogg_pages.chained_pages(data[head.length:], head.length)
    if problem:
        raise ValueError(problem)
    if not pages or pages[-1].end != len(data) or not pages[-1].flags & 0x04:
        raise ValueError("the file does not end with its end-of-stream page (a chain, or bytes after the stream)")
    if any(page.serial != head.serial or page.flags & 0x02 for page in pages):
        raise ValueError("the file holds more than one Ogg stream (chained or multiplexed)")
    if frames is None:
        import soundfile

        frames = soundfile.info(io.BytesIO(data)).frames
    granules = [page.granule for page in pages]
    final = granules[-1]
    first = final - int(frames)
    if final < 0 or first < 0 or (granules[0] != -1 and first > granules[0]):
        raise ValueError(f"the stream's first sample ({first}) is not where its first page says")
    step = max(1, int(round(every * head.rate)))
    rows, want = [(first, head.length)], first + step
    for n in range(1, len(pages) - 1):  # never the final page
        before, own = granules[n - 1], granules[n]
        if before == -1 or own == -1 or before < want:
            continue
        rows.append((before, pages[n].offset))
        want = before + step
    rows.append((final, len(data)))
    return np.asarray(rows, dtype=np.int64)


def read_span(points: np.ndarray, start: int, end: int, long_block: int) -> tuple[int, int]:
    """Rows ``(k, j)`` of ``points`` whose pages bound a read of frames ``[start, end)``: bytes
    ``[points[k, 1], points[j, 1])``.

    Row ``k`` is the last one whose first sample is at least ``long_block``
    before the excerpt (row 0 at worst); row ``j`` the first whose first
    sample is at or after its end, so the page before it completes it (the
    last row at worst).
    """
    base = int(points[0, 0])
    k = int(np.searchsorted(points[:-1, 0], start + base - long_block, side="right")) - 1
    j = int(np.searchsorted(points[:, 0], end + base, side="left"))
    return max(0, k), min(max(j, 1), len(points) - 1)


def planned_ranges(points: np.ndarray, start: float, length: float | None, duration: float) -> list[tuple[int, int]]:
    """The byte ranges :class:`~audiotree.io.flac_indexed.VorbisSeekFile` reads for ``length`` s at ``start`` s of
    a file of ``duration`` s with the table ``points``: the header pages, and the excerpt's pages (as if the long
    block were :data:`MAX_BLOCK`, and widened by a sample at each end for the rounding of seconds to samples)."""
    points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
    if len(points) < 2 or not duration:
        return []
    total = int(points[-1, 0] - points[0, 0])
    rate = total / float(duration)
    lo = max(0, int(start * rate) - 2)
    hi = total if length is None or not np.isfinite(length) else min(total, int((start + length) * rate) + 4)
    head = (0, int(points[0, 1]))
    if lo >= hi:
        return [head]
    k, j = read_span(points, lo, hi, MAX_BLOCK)
    lo_byte, hi_byte = int(points[k, 1]), int(points[j, 1])
    return [head, (lo_byte, hi_byte)] if lo_byte > head[1] else [(0, hi_byte)]


def read_excerpt(points: np.ndarray, header: bytes, start: int, end: int,
                 fetch: Callable[[int, int], bytes], head: VorbisHeader | None = None) -> np.ndarray:
    """Frames ``[start, end)`` of an Ogg Vorbis file by its table: one ``fetch(lo, hi)``, then a decode in memory.

    ``header`` is the file's header pages (bytes ``[0, points[0, 1])``), ``head``
    what :func:`vorbis_header` says of them (parsed here when not given).
    Every page fetched must follow the one before it (capture pattern, CRC,
    the header's stream, sequence) and the last must complete the granule
    its table row names. Raises ``ValueError`` saying what is wrong; returns
    float32 ``(frames, channels)`` (fewer only if the decode ends early: the
    caller checks).
    """
    import soundfile

    head = vorbis_header(header) if head is None else head
    k, j = read_span(points, start, end, head.long_block)
    lo, hi = int(points[k, 1]), int(points[j, 1])
    body = fetch(lo, hi)
    pages, problem = ogg_pages.chained_pages(body, lo)
    if problem or not pages or pages[-1].end != hi:
        raise ValueError(problem or f"bytes [{lo}, {hi}) are not whole Ogg pages")
    stranger = next((page for page in pages if page.serial != head.serial), None)
    if stranger is not None:
        raise ValueError(f"the Ogg page at byte {stranger.offset} is of another stream than the header's")
    if pages[-1].granule != points[j, 0] or (j == len(points) - 1) != bool(pages[-1].flags & 0x04):
        raise ValueError(f"the page ending at byte {hi} has granule position {pages[-1].granule}, not "
                         f"{int(points[j, 0])}")
    with soundfile.SoundFile(io.BytesIO(header + body)) as f:
        # libsndfile numbers its output from the first sample its first page completes: its last page's granule
        # position less the frames it counts.
        first = int(pages[-1].granule) - int(f.frames)
        skip = start + int(points[0, 0]) - first
        if skip < 0 or first < int(points[k, 0]):
            raise ValueError(f"decoding from byte {lo} starts at granule {first}, after the excerpt's "
                             f"{start + int(points[0, 0])}")
        x = f.read(skip + end - start, dtype="float32", always_2d=True)
    return x[skip:]


#: Seconds from the start of a file within which every row is checked against the local read (which decodes from
#: the first page there, where a seek would trust the granule positions: a stream cut by copying its packets can
#: disagree with them).
_CHECK_HEAD_SECONDS = 3.0
#: Further rows checked, spread over the file.
_CHECK_SPREAD = 12


def differs_from(points: np.ndarray, data: bytes, local: Callable[[int, int], np.ndarray]) -> str | None:
    """Where reads by ``points`` of the whole file ``data`` differ from ``local(start, frames)`` (the file's own
    read, called with increasing starts), or None: the evidence an index build keeps a table on.

    Compares one short excerpt decoded from each row's page in the first
    seconds, from rows spread over the rest, and the file's last samples.
    """
    points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
    head = vorbis_header(data)
    base, total = int(points[0, 0]), int(points[-1, 0] - points[0, 0])
    rows = np.arange(len(points) - 1)
    early = rows[points[:-1, 0] - base < _CHECK_HEAD_SECONDS * head.rate]
    spread = np.unique(np.linspace(0, len(rows) - 1, min(len(rows), _CHECK_SPREAD)).astype(np.int64))
    count = max(1, head.long_block)
    starts = {min(total - 1, int(points[k, 0]) - base + head.long_block) for k in np.union1d(early, spread)}
    starts |= {max(0, total - count), 0}
    for start in sorted(starts):
        frames = min(count, total - start)
        try:
            got = read_excerpt(points, data[:head.length], start, start + frames, lambda lo, hi: data[lo:hi])
        except ValueError as exc:
            return f"the excerpt at frame {start} does not read by the table ({exc})"
        want = local(start, frames)
        if got.shape != want.shape or not np.array_equal(got, want):
            return f"the excerpt at frame {start} read by the table differs from the file's own read"
    return None

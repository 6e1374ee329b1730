"""FLAC seek points: where each few seconds of a FLAC file start, so a remote excerpt is one ranged read.

A FLAC decoder seeking in a file it does not have locally probes it (a
binary search over frame positions): each probe is a request. Knowing, for a
few samples spread over the file, the byte offset of the frame that starts
there, an excerpt needs only the file's header (its metadata blocks, the same
for every excerpt, so a worker fetches it once) and the bytes from the seek
point before the excerpt to the one after it: one ranged GET.

:func:`seek_points` finds them, from the ``SEEKTABLE`` metadata block when the
encoder wrote one (libFLAC's command-line tool does; libsndfile does not), or
else by scanning the frame headers (sync code, then a CRC-8 check of the whole
header, so audio data that happens to look like a sync code is never taken
for a frame). The dataset reader
reads excerpts with them (:class:`audiotree.io.flac_indexed.FlacSeekFile`);
:func:`decode_frames` decodes the bytes it fetched (libsndfile, over a small
synthesized header: :func:`substream_header`).

The table is ``int64 (K, 2)``: rows ``[first sample, byte offset]`` of
frames, the first row the first frame, then about one every ``every``
seconds, increasing (16 bytes a second of audio). The corpus index computes it
once per file at index time (its ``seek_points`` column, see
:mod:`audiotree.index.table_schema`) and the dataset reader uses it for remote files
and members of remote shards (:mod:`audiotree.io.flac_indexed`).

A SEEKTABLE is used only when it is about as dense as ``every`` asks (``flac``
writes one point every 10 s by default, too coarse for a 3 s excerpt to cost
about its share of the file): otherwise the frame headers are scanned. Each
scanned point is confirmed by the next frame's header (consecutive, CRC-8
checked), so a sync code inside compressed data would have to fake two
headers in a row to become a point.
"""

from __future__ import annotations

import io

import numpy as np

from audiotree.io.integrity import flac_frame_header

__all__ = ["seek_points", "header_seek_points", "stream_info", "header_length", "streaminfo", "substream_header",
           "decode_frames", "SEEK_EVERY"]

#: Seconds between seek points.
SEEK_EVERY = 1.0

_MAGIC = b"fLaC"


def _blocks(data: bytes) -> tuple[dict[int, bytes], int]:
    """The metadata blocks ``{type: body}`` (first of each type) and the offset of the first frame."""
    if data[:4] != _MAGIC:
        raise ValueError("not a FLAC stream (no 'fLaC' marker at its start)")
    pos, blocks = 4, {}
    while True:
        if pos + 4 > len(data):
            raise ValueError("the FLAC metadata blocks run past the bytes given")
        head = data[pos]
        size = int.from_bytes(data[pos + 1 : pos + 4], "big")
        blocks.setdefault(head & 0x7F, data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        if head & 0x80:
            return blocks, pos


def header_length(data: bytes) -> int:
    """Bytes of a FLAC file before its first frame (marker and metadata blocks)."""
    return _blocks(data)[1]


def stream_info(header: bytes) -> tuple[int, int, int, int]:
    """``(sample rate, channels, bits per sample, total samples)`` from a FLAC file's STREAMINFO.

    ``header`` holds at least the marker and the metadata blocks. ``total``
    is 0 when the encoder did not know the length. ``ValueError`` for bytes
    that are not FLAC.
    """
    info = _blocks(header)[0].get(0)
    if info is None or len(info) < 18:
        raise ValueError("the FLAC stream has no STREAMINFO block")
    packed = int.from_bytes(info[10:18], "big")  # rate:20 channels-1:3 bits-1:5 total:36
    return packed >> 44, ((packed >> 41) & 0x7) + 1, ((packed >> 36) & 0x1F) + 1, packed & ((1 << 36) - 1)


def _table_points(table: bytes, first: int) -> list[tuple[int, int]]:
    """``[(sample, byte offset)]`` of a SEEKTABLE body: 18-byte points (sample, offset from the first frame,
    samples); placeholders are all ones."""
    raw = np.frombuffer(table[: len(table) // 18 * 18], dtype=np.uint8).reshape(-1, 18)
    samples = raw[:, 0:8].copy().view(">u8").reshape(-1)
    offsets = raw[:, 8:16].copy().view(">u8").reshape(-1)
    keep = samples != np.uint64(0xFFFFFFFFFFFFFFFF)
    return [(0, first)] + [(int(s), first + int(o)) for s, o in zip(samples[keep], offsets[keep]) if s > 0]


def header_seek_points(header: bytes, *, every: float = SEEK_EVERY) -> np.ndarray | None:
    """The seek points of a FLAC file's SEEKTABLE (its header alone), thinned to ``every`` s; ``None`` without one.

    What a headers-only index build stores: the points are as dense as the
    encoder wrote them (``flac``: every 10 s by default).
    """
    blocks, first = _blocks(header)
    rate = stream_info(header)[0]
    if not blocks.get(3):
        return None
    points = _thin(_table_points(blocks[3], first), max(1, int(round(every * rate))))
    return points if len(points) > 1 else None


def seek_points(data: bytes, *, every: float = SEEK_EVERY) -> np.ndarray:
    """``int64 (K, 2)`` rows ``[first sample, byte offset]`` of frames about ``every`` seconds apart.

    ``data`` is the whole file. Raises ``ValueError`` for bytes that are not FLAC.

    >>> import io, numpy as np, soundfile
    >>> buf = io.BytesIO()
    >>> soundfile.write(buf, np.zeros((8000 * 6, 1), np.float32), 8000, format="FLAC")
    >>> points = seek_points(buf.getvalue())
    >>> points[:, 0].tolist()
    [0, 8192, 16384, 24576, 32768, 40960]
    """
    blocks, first = _blocks(data)
    rate, _, _, total = stream_info(data)
    max_block = int.from_bytes(blocks[0][2:4], "big")
    step = max(1, int(round(every * rate)))
    if blocks.get(3):  # a SEEKTABLE as dense as asked saves the scan
        points = _thin(_table_points(blocks[3], first), step)
        if len(points) > 1 and np.all(np.diff(points[:, 0]) <= 2 * step) and points[-1, 1] < len(data):
            return points
    array = np.frombuffer(data, dtype=np.uint8)
    candidates = np.flatnonzero((array[first:-1] == 0xFF) & ((array[first + 1:] & 0xFE) == 0xF8)) + first
    points, want = [], 0
    for n, pos in enumerate(candidates):
        frame = flac_frame_header(data, int(pos))
        if frame is None:
            continue
        start = frame[0] if frame[2] else frame[0] * max_block  # fixed blocking: frame number x block size
        if start < want or (points and start <= points[-1][0]):
            continue
        if not _confirmed(data, candidates, n, start + frame[1], max_block, total):
            continue
        points.append((start, int(pos)))
        want = start + step
    if not points or points[0] != (0, first):
        raise ValueError("the FLAC stream's first frame does not start at sample 0 after its header")
    return np.asarray(points, dtype=np.int64).reshape(-1, 2)


def _confirmed(data: bytes, candidates: np.ndarray, n: int, following: int, max_block: int, total: int) -> bool:
    """Whether candidate ``n`` is followed by a frame header starting at sample ``following`` (or ends the stream)."""
    if total and following >= total:
        return following == total
    for pos in candidates[n + 1:n + 4097]:
        frame = flac_frame_header(data, int(pos))
        if frame is not None and (frame[0] if frame[2] else frame[0] * max_block) == following:
            return True
    return False


def _thin(points: list[tuple[int, int]], step: int) -> np.ndarray:
    out, want = [], 0
    for sample, offset in sorted(set(points)):
        if sample >= want:
            out.append((sample, offset))
            want = sample + step
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def streaminfo(header: bytes) -> bytes:
    """A FLAC file's header cut to its marker and STREAMINFO (42 bytes; what a decoder needs of it).

    ``ValueError`` for bytes that are not FLAC.

    >>> import io, numpy as np, soundfile
    >>> buf = io.BytesIO()
    >>> soundfile.write(buf, np.zeros((8000, 2), np.float32), 8000, format="FLAC")
    >>> head = streaminfo(buf.getvalue())
    >>> len(head), stream_info(head), header_length(head)
    (42, (8000, 2, 16, 8000), 42)
    """
    info = _blocks(header)[0].get(0)
    if info is None or len(info) < 34:
        raise ValueError("the FLAC stream has no STREAMINFO block")
    return _MAGIC + bytes([0x80]) + (34).to_bytes(3, "big") + bytes(info[:34])


def substream_header(head: bytes, first: int, stop: int, block: int) -> bytes:
    """The header that makes frames cut from a FLAC file, from sample ``first`` on, a stream libsndfile decodes.

    libsndfile reads a stream from its first frame on only when that frame starts
    at sample 0, but seeks in one whose SEEKTABLE names a frame: so ``fLaC``,
    the file's STREAMINFO (``head``: :func:`streaminfo`) saying the stream ends at sample ``stop``
    (where the cut frames end), and a SEEKTABLE of one point, the first cut frame
    (``first``, at byte 0 of the frames, ``block`` samples). The file's other
    metadata (tags, cover art, its own SEEKTABLE) is left out: a decoder needs none.

    >>> head = substream_header(b"fLaC" + bytes(38), 44100, 88200, 4096)
    >>> len(head), head[:4], stream_info(head)[3], header_length(head)
    (64, b'fLaC', 88200, 64)
    """
    info = head[8:42]
    packed = int.from_bytes(info[10:18], "big") >> 36 << 36 | stop  # the 36-bit total samples
    table = first.to_bytes(8, "big") + bytes(8) + block.to_bytes(2, "big")
    return (_MAGIC + bytes([0]) + (34).to_bytes(3, "big") + info[:10] + packed.to_bytes(8, "big") + info[18:34]
            + bytes([0x80 | 3]) + len(table).to_bytes(3, "big") + table)


def decode_frames(head: bytes, frames: bytes, first: int, stop: int, block: int, start: int, end: int) -> np.ndarray:
    """Samples ``[start, end)`` of a FLAC file from its ``frames`` (samples ``[first, stop)``) as float32
    ``(end - start, channels)``, decoded by libsndfile (the decoder of a local read: the same samples).

    ``head`` is the file's STREAMINFO (:func:`streaminfo`) and ``block`` the
    samples of the first frame; see :func:`substream_header`. A libsndfile error
    (frames that are not FLAC, a frame failing its CRC) is raised as it is.
    """
    import soundfile

    with soundfile.SoundFile(io.BytesIO(substream_header(head, first, stop, block) + frames)) as f:
        f.seek(start)
        return f.read(end - start, dtype="float32", always_2d=True)

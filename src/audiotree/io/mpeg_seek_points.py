"""MP3 seek points: where each half second of an MP3 starts, so a remote excerpt is one ranged read.

libsndfile (mpg123) seeks in an MP3 sample-accurately by reading the frames
from the first one on, so a remote excerpt at minute 3 reads every byte before
it. MPEG audio frames can be decoded from anywhere, though: knowing the byte
offset of some frames, an excerpt needs only the bytes from a few frames
before it (pre-roll: the bit reservoir lets a frame's data start up to 511
bytes before its header, and the filterbanks overlap the previous granule) to
the frame holding its last sample.

:func:`seek_points` builds the table at index time from the file's bytes; the
dataset reader reads excerpts with it
(:class:`audiotree.io.flac_indexed.MpegSeekFile`), through :func:`read_excerpt`.

The table is ``int64 (K, 2)``, rows ``[first output sample, byte offset]``:

* row 0 is the first audio frame (after any ID3v2 tag and the Xing/Info
  frame): its first sample is ``-delay``, the samples the decoder drops at the
  start (the encoder delay the LAME tag records, plus the decoder's 529);
* then a frame about every ``every`` seconds (:data:`SEEK_EVERY`), each row's
  sample ``frame number x samples per frame - delay``;
* the last row is the stream's end: the file's length in samples (what
  ``AudioFile(path).info.frames`` says) and the byte after its last frame.

Exact or nothing: the delay is not taken from the tag but measured, by
decoding a few frames from the middle of the stream and finding them in the
reference decode (the file as ``AudioFile`` reads it); then excerpts at the
start, middle and end are read both ways, and the table is kept only when
every one is equal (``np.array_equal``). Streams that are not a clean chain of
MPEG-1/2/2.5 layer III frames of one rate (junk between frames, free format,
layers I/II), or too short, get no table and read as before.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import numpy as np

from audiotree.io import integrity, mpeg_frames

__all__ = ["SEEK_EVERY", "PREROLL_FRAMES", "StreamLayout", "stream_layout", "seek_points", "frame_format",
           "read_excerpt", "decode_frames"]

#: Seconds between seek points (denser than FLAC's: a point is 16 bytes, against 8-40 kB of audio a second,
#: and an excerpt's bytes are read from the point before it to the point after it).
SEEK_EVERY = 0.5

#: Frames before the excerpt's first frame whose data must be whole (bit reservoir included) for its samples to
#: be exact: the granule before overlaps it, and the synthesis filterbank remembers 512 samples.
PREROLL_FRAMES = 3

# The largest MPEG audio frame (the decoded bytes are padded so that mpg123's length estimate covers them).
_MAX_FRAME_BYTES = 1729
# What may follow the last frame: tags.
_TRAILERS = (b"TAG", b"APETAGEX", b"LYRICSBEGIN", b"ID3")
# Frames an excerpt is read over when the table is checked (excerpts at the start, middle, end, and between).
_CHECK_FRAMES = 40


def frame_format(header: bytes) -> tuple[int, int, int, int] | None:
    """``(samples per frame, sample rate, channels, side information bytes)`` of a layer III frame header, or None.

    >>> frame_format(bytes([0xFF, 0xFB, 0x90, 0x64]))
    (1152, 44100, 2, 32)
    """
    found = mpeg_frames.frame_header(header)
    if found is None or (header[1] >> 1) & 3 != 1:  # layer III only
        return None
    mpeg1, mono = (header[1] >> 3) & 3 == 3, header[3] >> 6 == 3
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    return found[1], found[2], 1 if mono else 2, side + (0 if header[1] & 1 else 2)


class StreamLayout:
    """The layer III frames of an MP3: ``offsets`` (int64, each frame's first byte), ``end`` (after the last),
    ``spf`` (samples per frame), ``rate`` and ``channels``."""

    __slots__ = ("offsets", "end", "spf", "rate", "channels")

    def __init__(self, offsets: np.ndarray, end: int, spf: int, rate: int, channels: int) -> None:
        self.offsets, self.end, self.spf, self.rate, self.channels = offsets, end, spf, rate, channels


def stream_layout(data: bytes) -> StreamLayout:
    """The frames of the MP3 ``data`` (the whole file), from its first audio frame. ``ValueError`` unless they
    are a clean chain of layer III frames of one version, rate and channel count, followed by nothing but tags."""
    id3 = integrity.id3v2_size(data[:10])
    tag = mpeg_frames.read_tag(data[id3:id3 + 8192], len(data) - id3)
    if tag.audio < 0:
        raise ValueError("no MPEG frame after the ID3v2 tag")
    start = id3 + tag.audio
    first = frame_format(data[start:start + 4])
    if first is None:
        raise ValueError("not MPEG layer III")
    key = data[start + 1] << 8 | (data[start + 2] & 0x0C) | (data[start + 3] & 0xC0 == 0xC0)
    offsets, i, end = [], start, len(data)
    while i + 4 <= end and data[i] == 0xFF:
        found = mpeg_frames.frame_header(data[i:i + 4])
        if found is None or (data[i + 1] << 8 | (data[i + 2] & 0x0C) | (data[i + 3] & 0xC0 == 0xC0)) != key:
            break
        if i + found[0] > end:
            break  # a cut last frame: decoders drop it
        offsets.append(i)
        i += found[0]
    if i < end and not data.startswith(_TRAILERS, i):
        raise ValueError(f"bytes from {i} on are not MPEG frames of the stream")
    return StreamLayout(np.asarray(offsets, dtype=np.int64), i, first[0], first[1], first[2])


def decode_frames(body: bytes, count: int) -> np.ndarray:
    """The first ``count`` samples of the MPEG frames ``body`` as float32 ``(count or fewer, channels)``.

    The decoder the local read uses (libsndfile's mpg123, through soundfile),
    over the bytes in memory, padded with zeros so that its length estimate
    (bytes over the first frame's size) covers every frame; it never reads
    the padding, since only the frames' own samples are asked for.
    """
    import soundfile

    from audiotree.io.quiet import quiet_c_stderr

    head = mpeg_frames.frame_header(body[:4])
    per = head[0] if head else _MAX_FRAME_BYTES
    frames = count // (head[1] if head else 384) + 2
    padded = body + bytes(max(0, frames * per - len(body)) + 2 * _MAX_FRAME_BYTES)
    with quiet_c_stderr(), soundfile.SoundFile(io.BytesIO(padded)) as f:
        return f.read(count, dtype="float32", always_2d=True)


def _frames_whole(body: bytes, fmt: tuple[int, int, int, int]) -> tuple[list[bool], int]:
    """For each frame chained from byte 0 of ``body`` (all of format ``fmt``), whether its main data is all in
    ``body`` (decoding from its start, with an empty bit reservoir); and the bytes the chain covers."""
    out, pool, i, mpeg1 = [], 0, 0, body[1] >> 3 & 3 == 3 if body else True
    while i + 4 <= len(body):
        found = mpeg_frames.frame_header(body[i:i + 4])
        if found is None or frame_format(body[i:i + 4]) != fmt or i + found[0] > len(body):
            break
        side = body[i + 4 + (0 if body[i + 1] & 1 else 2):][:2]  # (main_data_begin leads the side information)
        begin = (side[0] << 1 | side[1] >> 7) if mpeg1 else side[0]
        out.append(begin <= pool)
        pool += found[0] - 4 - fmt[3]
        i += found[0]
    return out, i


def read_excerpt(points: np.ndarray, fmt: tuple[int, int, int, int], start: int, end: int,
                 fetch: Callable[[int, int], bytes]) -> np.ndarray:
    """Output samples ``[start, end)`` of an MP3 by its table ``points``: one ``fetch(lo, hi)``, then a decode.

    ``fmt`` is the stream's :func:`frame_format`. The read spans the point at
    or before the frame :data:`PREROLL_FRAMES` frames before the excerpt's
    first, to the first point after its last frame (and that point's header);
    a bit reservoir reaching further back (rare) costs one more read from the
    point before. Raises ``ValueError`` saying what is wrong when the bytes are
    not the chain of frames the table names. Returns float32 ``(end - start,
    channels)``, or fewer only if the decode ends early (the caller checks).
    """
    spf = fmt[0]
    delay = -int(points[0, 0])
    rows = points[:-1]
    frame_of = (rows[:, 0] + delay) // spf
    first, last = (start + delay) // spf, (end - 1 + delay) // spf
    k = int(np.searchsorted(frame_of, max(0, first - PREROLL_FRAMES - 1), side="right")) - 1
    j = int(np.searchsorted(frame_of, last + 1, side="left"))
    hi = int(points[j, 1])  # a seek point, or the stream's end (the last row)
    while True:
        lo, at = int(rows[k, 1]), int(frame_of[k])
        tail = 4 if j < len(rows) else 0
        body = fetch(lo, hi + tail)
        if frame_format(body[:4]) != fmt:
            raise ValueError(f"byte {lo} is not the MPEG frame header of its stream")
        if tail and frame_format(body[hi - lo:hi - lo + 4]) != fmt:
            raise ValueError(f"byte {hi} is not the MPEG frame header of its stream")
        body = body[:hi - lo]
        whole, covered = _frames_whole(body, fmt)
        count = (int(frame_of[j]) if j < len(rows) else None)
        if covered != len(body) or (count is not None and len(whole) != count - at):
            raise ValueError(f"bytes {lo} to {hi} are not {'the' if count is None else count - at} whole MPEG "
                             "frames of its stream")
        if k == 0 or all(whole[max(0, first - PREROLL_FRAMES) - at:]):
            break
        k -= 1
    skip = start + delay - at * spf
    return decode_frames(body, skip + end - start)[skip:]


def seek_points(data: bytes, reference: Any, *, every: float = SEEK_EVERY) -> np.ndarray | None:
    """``int64 (K, 2)`` table of the MP3 ``data`` (the whole file; see the module), or ``None`` if not exact.

    ``reference`` is the file opened as ``AudioFile`` (its ``info.frames``
    and ``read(start, n)``): the samples the table must reproduce.
    """
    try:
        layout = stream_layout(data)
    except ValueError:
        return None
    spf, offsets, total = layout.spf, layout.offsets, int(reference.info.frames)
    if len(offsets) < 4 * _CHECK_FRAMES or reference.info.sample_rate != layout.rate:
        return None
    delay = _delay(data, layout, reference)
    if delay is None:
        return None
    step = max(1, int(round(every * layout.rate / spf)))
    rows = [(k * spf - delay, int(offsets[k])) for k in range(0, len(offsets), step)]
    points = np.asarray(rows + [(total, layout.end)], dtype=np.int64)
    if points[-2, 0] >= total:
        return None
    return points if _exact(data, points, spf, reference) else None


def _delay(data: bytes, layout: StreamLayout, reference: Any) -> int | None:
    """The samples the decoder drops before output sample 0, measured: frames decoded from the middle of the
    stream found in the reference decode (one place only), or ``None``."""
    spf, offsets = layout.spf, layout.offsets
    for share in (0.5, 0.3, 0.7):
        p = int(len(offsets) * share)
        x = decode_frames(data[offsets[p]:offsets[p + 12]], 11 * spf)
        probe = x[(PREROLL_FRAMES + 2) * spf:(PREROLL_FRAMES + 2) * spf + 256]
        if len(probe) < 256 or not np.any(probe):
            continue
        raw = (p + PREROLL_FRAMES + 2) * spf  # the probe's first sample, counted from the first frame's
        lo = max(0, raw - 4 * spf - 600)
        ref = reference.read(lo, raw - lo + 256)
        hits = np.flatnonzero(ref[:len(ref) - 255, 0] == probe[0, 0])
        found = [int(h) for h in hits if np.array_equal(ref[h:h + 256], probe)]
        if len(found) == 1:
            return raw - (lo + found[0])
        return None
    return None


def _exact(data: bytes, points: np.ndarray, spf: int, reference: Any) -> bool:
    """Whether excerpts at the start, the end (clamped) and between read by ``points`` equal ``reference``'s."""
    total = int(points[-1, 0])
    n = _CHECK_FRAMES * spf
    starts = sorted({0, 1, spf // 3, total // 3 + 7, total // 2 + spf + 5, (2 * total) // 3 + 1,
                     max(0, total - n // 2), max(0, total - 3)})

    fmt = frame_format(data[int(points[0, 1]):int(points[0, 1]) + 4])
    for s in starts:
        end = min(total, s + n)
        try:
            got = read_excerpt(points, fmt, s, end, lambda lo, hi: data[lo:hi])
        except ValueError:
            return False
        if not np.array_equal(got, reference.read(s, end - s)):
            return False
    return True

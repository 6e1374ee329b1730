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
  start (with a LAME tag its encoder delay plus the decoder's 529, else 0);
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

Nor do CRC-protected MPEG-1 streams. mpg123's synthesis filterbank keeps a rotating
buffer whose phase (``bo``, one step per 32 samples, so 18 steps, 2 mod 16, a
granule) depends on how many granules a handle has synthesized since it
opened, and its float sums round by that phase: a local read's last bits depend
on what its handle synthesized before. For MPEG-1 (unprotected) decoding from
the frame :func:`decode_start` names reproduces the local read bit for bit
(about 2,400 random excerpts of 16 lame and ffmpeg encodes, 32-48 kHz, mono
and stereo, CBR 32-320 kbit/s and VBR). In one of two CRC-protected lame
encodes 2 of 9 excerpts differed by up to 6e-8: those keep today's read.
(Decoding from the frame mpg123's seek starts at, 2 before that one,
reproduced 3 CRC-protected MPEG-1 lame encodes, 386 excerpts each, where
:func:`decode_start` missed 13 and 38: a candidate, not yet adopted.)

MPEG-2/2.5 (8-24 kHz, one granule of 576 samples a frame) needs the rest of
what mpg123 does (libmpg123 1.32, read in its source and measured;
:func:`lsf_start`):

* Opening decodes the frames before the first output sample (the LAME tag's
  delay over 576: one, for lame's and ffmpeg's 1105) and stops at the next.
* A seek to sample ``b`` starts decoding at frame ``(b + delay) // 576 - 4``
  (its ``preframes``); unless that is the frame the handle stands at or the
  one after, it resets the decoder's buffers and bit reservoir, *not* the
  synthesis phase. So a local read decodes from that frame with the phase
  the open moved. :func:`read_excerpt` does the same: a fresh handle over the
  silent frames (the first frame's header, zeros) that move the phase as far,
  then the fetched frames, which it seeks to (resetting the rest).
* Decoding from a frame whose bit reservoir is missing is data-dependent: a
  frame that lacks it is decoded as silence, but for MPEG-2 mpg123 zeroes its
  side information from the third byte, so what is left of its
  ``part2_3_length`` either fits (the frame is synthesized) or not (it is
  skipped, the phase does not move). Hence no fixed frame, nor frame parity,
  reproduces low-bitrate mono reads: only starting where the local read's
  seek starts, after the same reset, does.
* Reads of the first frames (the seek target is at or right after where the
  open stopped) keep the open's state, or skip a frame: those are decoded the
  way the local read decodes them, from the Xing/Info frame before the first
  audio frame (fetched with them) on, by the same seek and read.

Measured: 12 lame and ffmpeg encodes (8, 11.025, 12, 16, 22.05, 24 kHz, mono
and stereo, CBR 8-64 kbit/s and VBR, with and without a Xing/LAME tag), 526
excerpts each (every 37th start over the first 24 frames, 150 random, the
end), and 9 CRC-protected lame encodes (8-24 kHz), about 247 each: all equal,
so CRC-protected MPEG-2/2.5 streams get a table too. A delay over 4 frames
(mpg123 then skips frames at open) gets no table.
"""

from __future__ import annotations

import io
from typing import Any, Callable

import numpy as np

from audiotree.io import integrity, mpeg_frames
from audiotree.io.soundfile_reader import MPEG_PREROLL_FRAMES

__all__ = ["SEEK_EVERY", "decode_start", "lsf_start", "StreamLayout", "stream_layout", "seek_points", "frame_format",
           "read_excerpt", "decode_frames", "planned_ranges", "MAX_DELAY"]

#: Seconds between seek points (denser than FLAC's: a point is 16 bytes, against 8-40 kB of audio a second,
#: and an excerpt's bytes are read from the point before it to the point after it).
SEEK_EVERY = 0.5

# Frames before the one holding a local read's first (pre-roll) sample that the decode starts at. mpg123 decodes a
# few frames before its seek target and drops their output; a decode started 2 frames back (or 4, 6...: its
# synthesis rounds alike from starts of the same parity, measured) gives the same bits at the excerpt.
_SEEK_PREFRAMES = 2

# The largest MPEG audio frame (the decoded bytes are padded so that mpg123's length estimate covers them).
_MAX_FRAME_BYTES = 1729
# MPEG-2/2.5: mpg123 starts decoding a seek this many frames before the frame holding its first sample (its
# ``preframes``), and the largest layer III frame (160 kbit/s at 8 kHz), so no longer Xing/Info frame.
_MPG123_PREFRAMES = 4
_MAX_LSF_FRAME = 1441
# What may follow the last frame: tags.
_TRAILERS = (b"TAG", b"APETAGEX", b"LYRICSBEGIN", b"ID3")
#: The most samples a decoder drops at the start: LAME's 12-bit encoder delay field, plus mpg123's 529.
MAX_DELAY = 4095 + 529
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


def _frame_key(data: bytes, i: int) -> int:
    """What every frame of a stream shares: version, layer, protection, sample rate, and mono or not."""
    return data[i + 1] << 16 | (data[i + 2] & 0x0C) << 8 | int(data[i + 3] >> 6 == 3)


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
    key = _frame_key(data, start)
    offsets, i, end = [], start, len(data)
    while i + 4 <= end and data[i] == 0xFF:
        found = mpeg_frames.frame_header(data[i:i + 4])
        if found is None or _frame_key(data, i) != key:
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


def _chain(body: bytes, fmt: tuple[int, int, int, int]) -> list[int]:
    """Offsets of the frames (all of format ``fmt``) chained from byte 0 of ``body``, then the byte after them."""
    if frame_format(body[:4]) != fmt:
        return [0]
    return mpeg_frames.frame_chain(body)


def decode_start(start: int, delay: int, spf: int) -> int:
    """The frame a local read of output sample ``start`` starts decoding at (see the module); for MPEG-2/2.5
    excerpts that :func:`lsf_start` replays from the stream's start, 0."""
    if spf != 1152:
        return lsf_start(start, delay, spf)[0]
    return max(0, (max(0, start - MPEG_PREROLL_FRAMES * spf) + delay) // spf - _SEEK_PREFRAMES)


def lsf_start(start: int, delay: int, spf: int) -> tuple[int, int]:
    """How a local read of output sample ``start`` of an MPEG-2/2.5 stream decodes: ``(frame, opened)``.

    Its seek starts decoding at ``frame`` after mpg123 reset its buffers but
    not its synthesis phase, which the ``opened`` granules it decoded when the
    file was opened (the frames before the first output sample, by the
    LAME tag's delay) had moved. ``opened`` is -1 where the seek keeps the
    state the open left (the excerpt lies in the first frames): such an
    excerpt is decoded the way the local read does it, from the Xing/Info frame
    on (``frame`` 0). See the module.
    """
    opened = delay // spf
    frame = max(0, (max(0, start - MPEG_PREROLL_FRAMES * spf) + delay) // spf - _MPG123_PREFRAMES)
    if opened and frame < opened + 2:
        return 0, -1
    return frame, opened


def _span(points: np.ndarray, spf: int, start: int, end: int) -> tuple[int, int]:
    """``(k, j)``: the excerpt ``[start, end)`` is read from point ``k`` to point ``j`` (``j`` may be the end row)."""
    delay = -int(points[0, 0])
    frame_of = (points[:-1, 0] + delay) // spf
    last = (end - 1 + delay) // spf
    k = int(np.searchsorted(frame_of, decode_start(start, delay, spf), side="right")) - 1
    return max(0, k), int(np.searchsorted(frame_of, last + 1, side="left"))


def planned_ranges(points: np.ndarray, start: float, length: float | None, duration: float) -> list[tuple[int, int]]:
    """The byte ranges :class:`~audiotree.io.flac_indexed.MpegSeekFile` reads for ``length`` s at ``start`` s of
    an MP3 of ``duration`` s with the table ``points``: its first frame's header, and the excerpt's span (widened
    by a frame at each end for the rounding of seconds to samples)."""
    points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
    total, first = int(points[-1, 0]), int(points[0, 1])
    rate = total / float(duration) if duration else 0.0
    if len(points) < 3 or rate <= 0:
        return []
    spf = 1152 if rate >= 32000 else 576  # (MPEG-1 has 1152 samples a frame, MPEG-2/2.5 576)
    lo_sample = max(0, int(start * rate) - spf)
    whole = length is None or not np.isfinite(length)
    hi_sample = total if whole else min(total, int((start + length) * rate) + spf + 1)
    if lo_sample >= hi_sample:
        return [(first, first + 4)]
    k, j = _span(points, spf, lo_sample, hi_sample)
    hi = int(points[j, 1]) + (4 if j < len(points) - 1 else 0)
    lo = int(points[k, 1])
    if spf != 1152 and lsf_start(lo_sample, -int(points[0, 0]), spf)[1] < 0:
        lo = max(0, first - _MAX_LSF_FRAME)  # (and the Xing/Info frame before the first audio frame)
    return [(first, first + 4), (lo, hi)]


def read_excerpt(points: np.ndarray, fmt: tuple[int, int, int, int], start: int, end: int,
                 fetch: Callable[[int, int], bytes]) -> np.ndarray:
    """Output samples ``[start, end)`` of an MP3 by its table ``points``: one ``fetch(lo, hi)``, then a decode.

    ``fmt`` is the stream's :func:`frame_format`. The bytes fetched run from
    the point at or before the frame the local read starts decoding at
    (:func:`decode_start`) to the first point after the excerpt's last frame
    (and that point's header); the decode starts at that same frame. Raises
    ``ValueError`` saying what is wrong when the bytes are not the chain of
    frames the table names. Returns float32 ``(end - start, channels)``, or
    fewer only if the decode ends early (the caller checks).

    MPEG-2/2.5 (:func:`lsf_start`): the decode repeats what the local read's
    seek leaves mpg123 in; an excerpt in the first frames also fetches the
    Xing/Info frame before the first audio frame and is decoded as the local
    read decodes it.
    """
    spf = fmt[0]
    delay = -int(points[0, 0])
    rows = points[:-1]
    frame_of = (rows[:, 0] + delay) // spf
    first, opened = (decode_start(start, delay, spf), 0) if spf == 1152 else lsf_start(start, delay, spf)
    k, j = _span(points, spf, start, end)
    lo, hi, at = int(rows[k, 1]), int(points[j, 1]), int(frame_of[k])  # (the last row: the stream's end)
    tail = 4 if j < len(rows) else 0
    ahead = min(lo, _MAX_LSF_FRAME) if opened < 0 else 0
    body = fetch(lo - ahead, hi + tail)
    lead, body = body[:ahead], body[ahead:]
    if frame_format(body[:4]) != fmt:
        raise ValueError(f"byte {lo} is not an MPEG frame header of its stream")
    if tail and frame_format(body[hi - lo:hi - lo + 4]) != fmt:
        raise ValueError(f"byte {hi} is not an MPEG frame header of its stream")
    chain = _chain(body[:hi - lo], fmt)
    if chain[-1] != hi - lo or (tail and len(chain) - 1 != int(frame_of[j]) - at) or first - at >= len(chain) - 1:
        raise ValueError(f"bytes {lo} to {hi} are not the {int(frame_of[j]) - at if tail else ''} whole MPEG frames "
                         "of its stream the index recorded there")
    skip = start + delay - first * spf
    frames = body[chain[first - at]:hi - lo]
    if opened < 0:
        return _replayed(_info_frame(lead, fmt, lo) + frames, max(0, start - MPEG_PREROLL_FRAMES * spf), start,
                         end - start)
    if opened:
        return _after_open(frames, opened, skip, end - start, spf)
    return decode_frames(frames, skip + end - start)[skip:]


def _info_frame(lead: bytes, fmt: tuple[int, int, int, int], at: int) -> bytes:
    """The Xing/Info frame that ``lead`` (the bytes before the first audio frame, at byte ``at``) ends with."""
    for p in range(max(0, len(lead) - _MAX_LSF_FRAME), len(lead) - 4):
        found, head = mpeg_frames.frame_header(lead[p:p + 4]), frame_format(lead[p:p + 4])
        if found and head and found[0] == len(lead) - p and head[1] == fmt[1]:
            at_tag = p + 4 + head[3] - (0 if lead[p + 1] & 1 else 2)  # (LAME leaves out a CRC's 2 bytes)
            if lead[at_tag:at_tag + 4] in (b"Xing", b"Info"):
                return lead[p:]
    raise ValueError(f"the bytes before the first audio frame (byte {at}) do not end with a Xing/Info frame")


def _replayed(image: bytes, begin: int, start: int, count: int) -> np.ndarray:
    """Samples ``[start, start + count)`` of ``image`` (a Xing/Info frame and the stream's first frames) read as
    the local read reads them: one seek to ``begin``, one read."""
    import soundfile

    from audiotree.io.quiet import quiet_c_stderr

    with quiet_c_stderr(), soundfile.SoundFile(io.BytesIO(image + bytes(2 * _MAX_FRAME_BYTES))) as f:
        f.seek(begin)
        return f.read(start - begin + count, dtype="float32", always_2d=True)[start - begin:]


def _after_open(frames: bytes, opened: int, skip: int, count: int, spf: int) -> np.ndarray:
    """The ``count`` samples after the first ``skip`` of the MPEG-2/2.5 ``frames``, decoded as a local read's seek
    decodes them (:func:`lsf_start`): by a handle that has synthesized ``opened`` granules (silent frames made
    from the first frame's header), then seeks (which resets all but the synthesis phase) to ``frames``."""
    import soundfile

    from audiotree.io.quiet import quiet_c_stderr

    head = frames[:4]
    size = mpeg_frames.frame_header(head)[0]
    lead = opened + 2  # (a seek to the frame after the one a handle stands at keeps its buffers: two more)
    image = (head + bytes(size - 4)) * lead + frames
    out = skip - _MPG123_PREFRAMES * spf  # (the seek's first output sample is _MPG123_PREFRAMES frames in)
    needed = (lead + (skip + count) // spf + 2) * size  # (mpg123's length estimate: bytes over the first frame's)
    padded = image + bytes(max(0, needed - len(image)) + 2 * _MAX_FRAME_BYTES)
    with quiet_c_stderr(), soundfile.SoundFile(io.BytesIO(padded)) as f:
        f.read((opened - 1) * spf + 1, dtype="float32")
        f.seek((lead + _MPG123_PREFRAMES) * spf)
        return f.read(out + count, dtype="float32", always_2d=True)[out:]


def seek_points(data: bytes, reference: Callable[[], Any], *, every: float = SEEK_EVERY) -> np.ndarray | None:
    """``int64 (K, 2)`` table of the MP3 ``data`` (the whole file; see the module), or ``None`` if not exact.

    ``reference()`` opens the file as ``AudioFile`` (a fresh handle each
    call: mpg123's output depends, in its last bits, on what the handle
    decoded before): the samples the table must reproduce.
    """
    try:
        layout = stream_layout(data)
    except ValueError:
        return None
    spf, offsets = layout.spf, layout.offsets
    if spf == 1152 and not data[int(offsets[0]) + 1] & 1:  # CRC-protected MPEG-1: see the module
        return None
    with reference() as audio:
        total, rate = int(audio.info.frames), int(audio.info.sample_rate)
        delay = _delay(data, layout, audio) if len(offsets) >= 4 * _CHECK_FRAMES and rate == layout.rate else None
    if delay is None or (spf != 1152 and delay // spf > _MPG123_PREFRAMES):  # (mpg123 skips frames at open)
        return None
    step = max(1, int(round(every * layout.rate / spf)))
    rows = [(k * spf - delay, int(offsets[k])) for k in range(0, len(offsets), step)]
    points = np.asarray(rows + [(total, layout.end)], dtype=np.int64)
    if points[-2, 0] >= total:
        return None
    return points if _exact(data, points, spf, reference) else None


def _delay(data: bytes, layout: StreamLayout, audio: Any) -> int | None:
    """The samples the decoder drops before output sample 0, measured: frames decoded from the middle of the
    stream found in ``audio``'s decode (one place only, to float rounding), or ``None``."""
    spf, offsets = layout.spf, layout.offsets
    for share in (0.5, 0.3, 0.7):
        p = int(len(offsets) * share)
        x = decode_frames(data[offsets[p]:offsets[p + 20]], 19 * spf)
        probe = x[14 * spf:14 * spf + 256, 0]  # (far enough for a low bitrate's bit reservoir to be whole)
        if len(probe) < 256 or np.abs(probe).max() < 1e-3:
            continue
        raw = (p + 14) * spf  # the probe's first sample, counted from the first frame's
        lo = max(0, raw - 5 * spf)
        ref = audio.read(lo, raw - lo + 256)[:, 0]
        if len(ref) < 512:
            return None
        gaps = np.abs(np.lib.stride_tricks.sliding_window_view(ref, 256) - probe).max(axis=1)
        best = int(np.argmin(gaps))
        if gaps[best] > 1e-5 or np.count_nonzero(gaps < 1e-3) != 1:
            return None
        return raw - (lo + best)
    return None


def _exact(data: bytes, points: np.ndarray, spf: int, reference: Callable[[], Any]) -> bool:
    """Whether excerpts at the start, the end (clamped) and between read by ``points`` equal ``reference``'s."""
    total = int(points[-1, 0])
    n = _CHECK_FRAMES * spf
    spread = np.random.default_rng(len(data)).integers(0, max(1, total - n), 12)  # (all frame parities, in effect)
    starts = sorted({0, 1, spf // 3, 3 * spf + 7, total // 3 + 7, total // 2 + spf + 5, (2 * total) // 3 + 1,
                     max(0, total - n // 2), max(0, total - 3), *(int(s) for s in spread)})
    if spf != 1152:  # MPEG-2/2.5: every way a read of the first frames goes (see lsf_start)
        starts = sorted(set(starts) | set(range(0, (_MPG123_PREFRAMES + 16) * spf, spf // 2 - 1)))
    fmt = frame_format(data[int(points[0, 1]):int(points[0, 1]) + 4])
    for s in starts:
        end = min(total, s + n)
        try:
            got = read_excerpt(points, fmt, s, end, lambda lo, hi: data[lo:hi])
        except ValueError:
            return False
        with reference() as audio:
            if not np.array_equal(got, audio.read(s, end - s)):
                return False
    return True

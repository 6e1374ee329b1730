"""Decoding audio excerpts: open once, seek, decode only the requested frames.

This is the hot path of the data loader, so the common case (a WAV or FLAC
file read through libsndfile) does nothing beyond one ``seek`` and one
``read`` per excerpt plus a cheap finiteness check.

Layout and units
    Every read returns ``float32`` samples shaped ``(frames, channels)``
    (the interleaved decoder layout, C-contiguous), at the file's native
    sample rate; nothing is resampled or remixed. Positions and lengths are
    in *frames* (one sample per channel). Integer PCM is scaled to
    ``[-1, 1)`` exactly as libsndfile does (``x / 2**(bits-1)``).

Determinism
    For a given file and decoder version, ``read(start, n)`` returns the same
    samples as one sequential decode of the whole file sliced at
    ``[start:start + n]``, whatever reads came before on the same
    :class:`AudioFile`. This is exact for PCM, FLAC, Vorbis, MP3 and (PNS-free)
    AAC. Two decoders are only approximately seek-invariant: Opus (after a
    seek the decoder re-converges within libsndfile's 80 ms pre-roll; we
    measured deviations up to ~5e-3 at very low bitrates, ~1e-3 typically)
    and AAC streams using perceptual noise substitution (PNS bands come from
    a pseudo-random generator whose state depends on where decoding
    started). In both cases the *timing* is still sample-exact.

Bad data never passes as audio
    Every read either returns exactly the frames the header promised
    (``min(num_frames, info.frames - start_frame)``), finite, or raises
    :class:`~audiotree.errors.AudioReadError` naming the file and the fault.
    Opening a file checks its header's frame count against what the file's
    bytes can hold (:mod:`audiotree.io.integrity`; nothing is allocated for a
    lying header), refuses Ogg streams without their end-of-stream page and
    MP3s whose Xing/Info header records more bytes than the file has, and
    tells genuinely empty files from ones claiming 0 frames over audio data.
    A decode that stops before the promised frames is an error, never padding.
    The one estimate is an MP3 without a length header: decoding may end up
    to :data:`MP3_ESTIMATE_TOLERANCE_FRAMES` MPEG frames before mpg123's
    estimated length, and that tail is returned as silence.

Workarounds (measured with libsndfile 1.2.2 / soundfile 0.14 / PyAV 18)
    * soundfile re-seeks to the current position after *every* read call.
      For MP3 that re-seek makes mpg123 drop its bit reservoir, so reading
      a file in several calls returns wrong audio after the first call
      (errors ~0.5 on mono low-bitrate files); for Opus it corrupts a
      following read that starts inside the final Ogg page. Each excerpt of
      a lossy file is therefore decoded by one deliberate seek plus ONE read
      call that covers pre-roll and excerpt; decoder state left behind by an
      earlier read is never decoded from (Vorbis excepted, see below).
    * MP3: an mpg123 seek is not sample-exact for the first frames after it
      (missing bit reservoir). We seek 8 MPEG frames early and discard them.
    * Ogg/Vorbis: a forward seek of less than 2 s on a handle that has
      already decoded takes libsndfile's "skip" path, which miscounts lapped
      block sizes and returns shifted or garbled audio (libsndfile #885), so
      such hops decode through from the current position instead (for
      Vorbis soundfile's re-seek to the current position is a no-op).
    * Ogg/Vorbis and Ogg/Opus: a seek whose target lies in the final Ogg page
      is shifted by the end-trim amount (the page's granule position is used
      as if it were untrimmed). We never seek into the final page: we seek
      just before it (found by parsing the file's last pages) and decode
      forward.
    * PyAV (AAC etc.): after a seek the first decoded frame lacks its MDCT
      overlap, and ``flush_buffers`` does not reset all decoder state. We
      pre-roll, trim by frame timestamps, and decode reads that start at
      the very beginning with a freshly opened decoder.
"""

from __future__ import annotations

import operator
import os
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import integrity
from audiotree.io import storage
from audiotree.io.extensions import PYAV_EXTENSIONS, normalize_extension, pyav_available
from audiotree.io.quiet import quiet_c_stderr

__all__ = ["AudioInfo", "AudioFile", "probe", "read_frames"]

_SKIP_HINT = 'or use on_read_error="skip" to skip unreadable files'


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AudioInfo:
    """Header information about an audio file.

    Attributes:
        path: The file path, as given (``os.fsdecode``-ed to ``str``).
        frames: Length in frames (samples per channel). Exact for every
            libsndfile format; for PyAV files it comes from container metadata
            (see :func:`probe`).
        sample_rate: Native sample rate in Hz.
        channels: Number of channels.
        format: Container format: libsndfile's major format name (``"WAV"``,
            ``"FLAC"``, ``"OGG"``, ``"MP3"``, ``"AIFF"``, ...) or, for PyAV,
            FFmpeg's demuxer name upper-cased (``"MOV"`` for MP4/M4A,
            ``"ASF"`` for WMA, ...).
        subtype: Sample encoding / codec: libsndfile's subtype
            (``"PCM_16"``, ``"FLOAT"``, ``"VORBIS"``, ``"MPEG_LAYER_III"``,
            ...) or, for PyAV, the FFmpeg codec name upper-cased (``"AAC"``).
            ``None`` if unknown.
    """

    path: str
    frames: int
    sample_rate: int
    channels: int
    format: str
    subtype: str | None

    @property
    def duration(self) -> float:
        """Length in seconds (``frames / sample_rate``; 0.0 if the rate is 0)."""
        if self.sample_rate <= 0:
            return 0.0
        return self.frames / self.sample_rate


# ---------------------------------------------------------------------------
# Error helpers
# ---------------------------------------------------------------------------


def _failure_hint(path: str, size: int | None) -> str:
    """An actionable hint for a file that failed to open or decode."""
    path = storage.redact(path)
    if size == 0:
        return (
            "The file is empty (0 bytes); it was probably truncated while being copied or "
            f"downloaded. Re-create it or remove it from the dataset, {_SKIP_HINT}."
        )
    if not storage.is_url(path) and os.path.isdir(path):
        return "The path is a directory, not an audio file; fix the file list."
    return (
        "The file may be corrupt, truncated, or not audio at all. Re-encode it "
        f"(e.g. to WAV or FLAC) or remove it from the dataset, {_SKIP_HINT}."
    )


def _describe(exc: BaseException) -> str:
    # Exception texts often end with a period; avoid "..". in the message.
    text = str(exc).strip().rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error(path: str, exc: BaseException, hint: str) -> AudioReadError:
    message = f"Failed to read audio file '{path}': {_describe(exc)}. {hint}"
    return AudioReadError(storage.redact(message), storage.redact(path))


def _file_size(path: str) -> int | None:
    try:
        return storage.file_size(path)
    except OSError:
        return None


def _read_span(source: Any, offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset`` (negative: from the end) of a path or an open file object.

    A file object shared with a decoder gets its position back, so the
    decoder's own bookkeeping stays right.
    """
    if isinstance(source, str):
        with open(source, "rb") as fh:
            return _read_span(fh, offset, count)
    saved = source.tell()
    try:
        size = source.seek(0, os.SEEK_END)
        source.seek(max(0, size + offset) if offset < 0 else offset)
        return source.read(count)
    finally:
        source.seek(saved)


def _check_finite(x: np.ndarray, path: str, start: int) -> None:
    """Raise AudioReadError if ``x`` holds NaN or +-Inf.

    ``np.isfinite(x).all()`` is SIMD-vectorised (about 18 us for 3 s of
    44.1 kHz stereo), exact, and unlike a sum- or dot-product-based shortcut
    it neither overflows on huge-but-finite float samples nor emits
    floating-point warnings.
    """
    if np.isfinite(x).all():
        return
    raise AudioReadError(
        f"Failed to read audio file '{path}': it contains NaN/Inf samples (in frames "
        f"{start}-{start + len(x)}). Such a file would poison training; remove it or "
        f"re-encode it from a clean source, {_SKIP_HINT}.",
        path,
    )


# ---------------------------------------------------------------------------
# libsndfile backend
# ---------------------------------------------------------------------------

# How libsndfile positions are reached for each codec family.
_EXACT, _VORBIS, _OPUS, _MPEG = range(4)

# libsndfile's Vorbis decoder bisects only for seeks >= 2 s ahead (or any seek
# backwards); shorter forward seeks take the buggy skip path. Decoding
# through instead is correct and costs at most 2 s of extra decoding.
_VORBIS_SKIP_SECONDS = 2

# MP3 pre-roll in MPEG frames: the bit reservoir may reference up to 511 bytes
# of earlier frames (several frames at low bitrates) plus one granule of
# filterbank overlap. 6 frames was the smallest value with no mismatches
# over 30 files x 150 random seeks (8-48 kHz, mono/stereo, all compression
# levels); 8 leaves a margin.
_MPEG_PREROLL_FRAMES = 8

# Largest possible Ogg page: 27-byte header + 255 lacing values + 255*255 body.
_OGG_MAX_PAGE = 27 + 255 + 255 * 255


def _ogg_final_page_span(path: Any) -> int | None:
    """Granule span of the last Ogg page of ``path``, or None if unparsable.

    The span is in the codec's granule units (samples for Vorbis, 48 kHz
    samples for Opus). Only the tail of the file is read (at most two maximal
    pages); candidate pages are found by their capture pattern and accepted
    only if they chain back-to-back from the end of the file, which rejects
    "OggS" byte sequences that happen to occur inside packet data.
    """
    buf = _read_span(path, -2 * _OGG_MAX_PAGE, 2 * _OGG_MAX_PAGE)
    pages: dict[int, tuple[int, int, int]] = {}  # end offset -> (start, granule, serial)
    i = buf.find(b"OggS")
    while i >= 0:
        if i + 27 <= len(buf) and buf[i + 4] == 0:
            nseg = buf[i + 26]
            body_start = i + 27 + nseg
            if body_start <= len(buf):
                end = body_start + sum(buf[i + 27 : body_start])
                if end <= len(buf):
                    granule, serial = struct.unpack_from("<qI", buf, i + 6)
                    pages.setdefault(end, (i, granule, serial))
        i = buf.find(b"OggS", i + 1)
    # The last page is the one ending at the end of the file (or, if junk
    # follows it, the one ending furthest into the tail). It must carry the
    # end-of-stream flag; otherwise the tail is not what we think it is.
    if not pages:
        return None
    last_end = len(buf) if len(buf) in pages else max(pages)
    last_start, last_granule, serial = pages[last_end]
    if last_granule < 0 or not buf[last_start + 5] & 0x04:
        return None
    # Walk back through the chain of pages to the previous page of the same
    # logical stream that has a granule position (-1 means "no packet ends on
    # this page").
    cursor = last_start
    while cursor in pages:
        start, granule, page_serial = pages[cursor]
        if page_serial == serial and granule >= 0:
            return max(0, last_granule - granule)
        cursor = start
    # The previous page is not in the tail: the last page starts the stream
    # (tiny file) or the chain is broken; let the caller be conservative.
    return None


class _SoundfileReader:
    """A libsndfile handle plus the position bookkeeping the workarounds need."""

    backend = "soundfile"

    __slots__ = ("_file", "_source", "info", "_mode", "_pos", "_preroll", "_tail", "length_slack")

    def __init__(self, path: str, source: Any = None) -> None:
        # ``source``: the local path, or an open remote file object (closed by close()).
        self._source = path if source is None else source
        f = soundfile.SoundFile(self._source)
        self._file = f
        self.info = AudioInfo(path, int(f.frames), int(f.samplerate), int(f.channels), f.format, f.subtype)
        subtype = f.subtype
        self._preroll = 0
        if subtype == "VORBIS":
            self._mode = _VORBIS
        elif subtype == "OPUS":
            self._mode = _OPUS
        elif subtype in ("MPEG_LAYER_I", "MPEG_LAYER_II", "MPEG_LAYER_III") or f.format == "MP3":
            self._mode = _MPEG
            if subtype == "MPEG_LAYER_I":
                per_frame = 384
            elif subtype == "MPEG_LAYER_III" and f.samplerate < 32000:
                per_frame = 576  # MPEG-2/2.5 layer III frames are half length
            else:
                per_frame = 1152
            self._preroll = _MPEG_PREROLL_FRAMES * per_frame
        else:
            self._mode = _EXACT
        self._pos: int | None = 0  # libsndfile's read position, None if unknown
        self._tail: int | None = None  # first frame of the final Ogg page (lazy)
        # Frames by which decoding may fall short of an estimated length
        # (set by _check_length_claim for MP3 without a length header).
        self.length_slack = 0

    def close(self) -> None:
        self._file.close()
        if not isinstance(self._source, str):
            self._source.close()

    def _position(self) -> int:
        if self._pos is None:
            self._pos = int(self._file.tell())
        return self._pos

    def _final_page_start(self) -> int:
        """First frame of the final Ogg page; seeks must not target beyond it."""
        if self._tail is None:
            info = self.info
            try:
                span = _ogg_final_page_span(self._source)
            except OSError:
                span = None
            if span is None:
                # Unparsable tail: assume a generous page length. Correctness
                # is kept (we decode through), only near-end reads get slower.
                frames_in_page = 10 * info.sample_rate
            elif self._mode == _OPUS:
                # Opus granules count 48 kHz samples whatever the output rate.
                frames_in_page = -(-span * info.sample_rate // 48000)
            else:
                frames_in_page = span
            self._tail = max(0, info.frames - frames_in_page)
        return self._tail

    def _plan(self, start: int) -> int:
        """Frame at which decoding must start so that ``start`` comes out exact.

        Returns the current position when the excerpt should be reached by
        decoding through instead of seeking (Vorbis short forward hops).
        """
        mode = self._mode
        if mode == _MPEG:
            return max(0, start - self._preroll)
        target = start
        tail = self._final_page_start()
        if target > tail:
            target = max(0, tail - 1)
        if mode == _VORBIS:
            pos = self._position()
            if pos <= target < pos + _VORBIS_SKIP_SECONDS * self.info.sample_rate:
                return pos
        return target

    def read(self, start: int, count: int) -> np.ndarray:
        f = self._file
        try:
            if self._mode == _EXACT:
                if start != self._pos:
                    f.seek(start)
                x = f.read(count, dtype="float32", always_2d=True)
                self._pos = start + len(x)
                return x
            # Lossy codecs: one deliberate seek, then ONE read call covering
            # pre-roll + excerpt. A single call matters: soundfile re-seeks
            # to the current position after every read, and for MP3 (mpg123)
            # that drops the bit reservoir, while for Opus it corrupts a
            # following read that starts inside the final page. State left
            # behind by an earlier read is therefore never decoded from,
            # except for Vorbis where that re-seek is a no-op.
            begin = self._plan(start)
            # The MP3 pre-roll makes libmpg123 complain on the C stderr stream
            # about the frames we discard; see audiotree.io.quiet.
            with quiet_c_stderr(self._mode == _MPEG):
                if self._mode != _VORBIS or begin != self._position():
                    begin = int(f.seek(begin))
                    if begin > start:  # pragma: no cover - defensive
                        raise RuntimeError(f"decoder seek to frame {start} landed at {begin}")
                x = f.read(start - begin + count, dtype="float32", always_2d=True)
            self._pos = begin + len(x)
            skip = start - begin
            if skip:
                # Copy so the caller does not keep the pre-roll buffer alive.
                x = x[skip:].copy() if len(x) > skip else x[:0].copy()
            return x
        except BaseException:
            self._pos = None  # the decoder state is unknown; re-query before reuse
            raise


# ---------------------------------------------------------------------------
# PyAV backend
# ---------------------------------------------------------------------------

# Integer sample formats and the divisor that maps them to [-1, 1).
_AV_INT_SCALE = {"s16": 32768.0, "s32": 2147483648.0, "s64": 9223372036854775808.0}


# PyAV's ``AudioFrame.to_ndarray`` reads every plane through ``AVFrame.data``,
# which holds 8 pointers (AV_NUM_DATA_POINTERS); FFmpeg keeps the planes of
# channels past the 8th in ``extended_data`` only. A planar frame of more than
# 8 channels (16-channel Opus, or a hostile header) therefore made PyAV read
# through garbage pointers and crash the process. Such frames are first
# interleaved by FFmpeg's resampler, which reads ``extended_data`` (one plane).
_PYAV_SAFE_PLANES = 8


class _PyAVReader:
    """A PyAV (FFmpeg) container opened once, read with sample-aligned seeks."""

    backend = "pyav"

    __slots__ = (
        "_path",
        "_source",
        "_dirty",
        "_container",
        "_stream",
        "_codec",
        "info",
        "_rate",
        "_tb_num",
        "_tb_den",
        "_origin",
        "_preroll",
        "_jitter",
        "length_slack",
        "_packer",
    )

    def __init__(self, path: str, source: Any = None) -> None:
        self._path = path
        self._source = path if source is None else source  # path or open remote file object
        self._dirty = False
        self._packer = None  # an av.AudioResampler, made for the first frame of > 8 planes
        self.length_slack = 0  # raised by _duration_frames when the length is an estimate
        self._open_container()
        container, stream, codec = self._container, self._stream, self._codec
        try:
            if not container.streams.audio:
                raise ValueError("the file contains no audio stream")
            sample_rate = int(codec.sample_rate or 0)
            channels = int(codec.channels or 0)
            if sample_rate <= 0 or channels <= 0:
                raise ValueError(f"invalid audio stream ({sample_rate} Hz, {channels} channels)")
            time_base = stream.time_base or Fraction(1, sample_rate)
            self._rate = sample_rate
            self._tb_num = int(time_base.numerator)
            self._tb_den = int(time_base.denominator)
            # Timestamps coarser than a sample (1 ms in Matroska/WebM) jitter
            # by up to one tick; smaller disagreements are not real gaps.
            self._jitter = self._to_samples(1) + 1
            # Sample 0 is the stream's first presentation time if that is
            # positive (e.g. MPEG-TS); negative start times mean encoder
            # priming that FFmpeg exposes instead of trimming, and those
            # samples fall before 0 and are dropped.
            start_time = stream.start_time
            self._origin = int(start_time) if start_time is not None and start_time > 0 else 0
            frames = self._duration_frames(container, stream, sample_rate)
            # Pre-roll covers decoder warm-up after a flush: one codec frame
            # is enough for AAC's MDCT overlap (measured); 0.1 s also covers
            # Opus (80 ms recommended) and Vorbis long blocks.
            frame_size = int(codec.frame_size or 0)
            self._preroll = max(2 * frame_size, -(-sample_rate // 10), 4096)
            fmt_name = (container.format.name or "").split(",")[0].upper()
            self.info = AudioInfo(path, frames, sample_rate, channels, fmt_name, (codec.name or "").upper() or None)
        except BaseException:
            container.close()
            raise

    def _open_container(self) -> None:
        import av  # deferred: importing FFmpeg is slow and optional

        if not isinstance(self._source, str):
            self._source.seek(0)  # a re-open (fresh decoder) starts from the top
        container = av.open(self._source, mode="r")
        try:
            streams = container.streams.audio
            stream = streams[0] if streams else None
        except BaseException:
            container.close()
            raise
        self._container = container
        self._stream = stream
        self._codec = stream.codec_context if stream is not None else None
        self._dirty = False

    def _duration_frames(self, container: Any, stream: Any, sample_rate: int) -> int:
        """Stream length in frames, from metadata (no decoding).

        Preference: the stream duration (exact for MP4/M4A, where it comes
        from the edit list and so already excludes encoder priming/padding);
        else the container duration (may be a bitrate estimate); else the sum
        of packet durations from demuxing (reads the file but decodes
        nothing; needed for raw ADTS ``.aac``).
        """
        if stream.duration is not None and stream.duration > 0:
            return self._to_samples(int(stream.duration))
        if container.duration is not None and container.duration > 0:
            # container.duration is in AV_TIME_BASE (microseconds), and may be
            # FFmpeg's estimate from the bitrate: allow decoding to end a
            # quarter second short of it (see AudioFile.read).
            self.length_slack = -(-sample_rate // 4)
            return int(round(container.duration * sample_rate / 1_000_000))
        total = 0
        self._dirty = True
        for packet in container.demux(stream):
            if packet.duration:
                total += int(packet.duration)
        return self._to_samples(total)

    def close(self) -> None:
        self._container.close()
        if not isinstance(self._source, str):
            self._source.close()

    def _to_samples(self, ticks: int) -> int:
        """Convert a duration in stream time-base ticks to frames (rounded)."""
        num = ticks * self._tb_num * self._rate
        return (2 * num + self._tb_den) // (2 * self._tb_den)

    def _frame_position(self, pts: int) -> int:
        return self._to_samples(pts - self._origin)

    def _decode_from(self, seek_frame: int | None) -> Any:
        """Yield decoded frames from ``seek_frame`` (None/0: the very start).

        Decoding from the start uses a pristine container and decoder:
        ``flush_buffers`` does not reset every piece of decoder state (with
        FFmpeg's AAC decoder, a stream's first frame decoded after a flush
        differed from a fresh decode by up to 0.1 in our tests), and a
        timestamp seek to 0 may land after the priming packet. Later seeks
        are followed by a pre-roll that absorbs such transients.
        """
        if seek_frame is None or seek_frame <= 0:
            if self._dirty:
                self._container.close()
                self._open_container()
        else:
            # floor(seek_frame / rate / time_base) in integer arithmetic
            ts = self._origin + (seek_frame * self._tb_den) // (self._rate * self._tb_num)
            self._container.seek(ts, stream=self._stream, backward=True, any_frame=False)
            # container.seek does not reset decoders; stale delayed frames
            # from a previous read would otherwise be emitted first.
            self._codec.flush_buffers()
        self._dirty = True
        container, stream, codec = self._container, self._stream, self._codec
        for packet in container.demux(stream):
            yield from codec.decode(packet)

    def _as_frames_by_channels(self, frame: Any, channels: int) -> np.ndarray:
        """Frame samples as (samples, channels) in their native dtype (a view when possible)."""
        got = len(frame.layout.channels)
        if got != channels:
            raise _bad_file(self._path, f"a decoded frame has {got} channels but the stream declares {channels}")
        if frame.format.is_planar and channels > _PYAV_SAFE_PLANES:
            frame = self._interleave(frame)
        arr = frame.to_ndarray()
        if frame.format.is_planar:
            return arr.T  # (channels, samples) -> (samples, channels)
        return arr.reshape(-1, channels)

    def _interleave(self, frame: Any) -> Any:
        """The same samples as one interleaved plane (see ``_PYAV_SAFE_PLANES``)."""
        import av

        if self._packer is None:
            self._packer = av.AudioResampler(format=frame.format.packed, layout=frame.layout, rate=frame.sample_rate)
        packed = self._packer.resample(frame)
        if len(packed) != 1 or packed[0].samples != frame.samples:
            raise _bad_file(self._path, f"interleaving a {len(frame.layout.channels)}-channel frame of {frame.samples} "
                            f"samples gave {sum(f.samples for f in packed)}")
        return packed[0]

    def read(self, start: int, count: int) -> np.ndarray:
        """Decode frames ``[start, start + count)``, placed by their timestamps.

        Seeks ``preroll`` frames early (decoder warm-up), then trims every
        decoded frame against the requested span using its presentation
        timestamp converted to samples, so the first returned sample is
        exactly ``start``. If the seek overshoots (or frames carry no
        timestamps) it decodes from the beginning instead.
        """
        channels = self.info.channels
        end = start + count
        out = np.zeros((count, channels), dtype=np.float32)
        filled_to = start  # samples in [start, filled_to) are final
        seek_frame: int | None = max(0, start - self._preroll)
        while True:
            from_beginning = seek_frame is None or seek_frame == 0
            expected: int | None = None
            overshot = False
            for frame in self._decode_from(seek_frame):
                n = frame.samples
                if frame.pts is not None:
                    pos = self._frame_position(int(frame.pts))
                    if expected is not None and abs(pos - expected) <= self._jitter:
                        pos = expected  # count samples; the timestamp is just coarse
                elif expected is not None:
                    pos = expected
                elif from_beginning:
                    pos = 0
                else:
                    overshot = True  # cannot place the frame: start over from 0
                    break
                if expected is None and pos > start and not from_beginning:
                    overshot = True  # samples before `pos` would be missing
                    break
                if expected is not None and pos - expected > self._jitter and pos > start and expected < end:
                    # Packets the decoder dropped (corrupt data) leave a hole in
                    # the timeline; zeros there would pass for audio.
                    raise _bad_file(self._path, f"decoding skipped frames {max(expected, start)}-{min(pos, end)} "
                                    "(corrupt or missing packets)")
                expected = pos + n
                if pos + n <= start:
                    continue  # pre-roll / before the excerpt
                if pos >= end:
                    break
                lo = max(start - pos, 0)
                hi = min(end - pos, n)
                block = self._as_frames_by_channels(frame, channels)[lo:hi]
                dest = out[pos + lo - start : pos + hi - start]
                kind = frame.format.name.rstrip("p")
                if kind in _AV_INT_SCALE:
                    np.multiply(block, np.float32(1.0 / _AV_INT_SCALE[kind]), out=dest, casting="unsafe")
                elif kind == "u8":
                    # float32 arithmetic: uint8 - 128 would wrap around
                    np.subtract(block, np.float32(128.0), out=dest, casting="unsafe")
                    dest *= np.float32(1.0 / 128.0)
                else:
                    dest[...] = block  # flt / dbl
                filled_to = max(filled_to, pos + hi)
                if pos + n >= end:
                    break
            if not overshot:
                break
            seek_frame = None
        # A stream with a leading gap leaves zeros before its first sample.
        # At the decoder's end of stream fewer frames are returned: for PyAV
        # `info.frames` can be an estimate, so only decoded samples count.
        return out[: max(0, filled_to - start)]


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _extension(path: str) -> str:
    ext = os.path.splitext(path)[1]
    return normalize_extension(ext) if ext not in ("", ".") else ""


def _open_reader(path: str) -> _SoundfileReader | _PyAVReader:
    """Open ``path`` (a local path or a URL) with the right decoder or raise AudioReadError."""
    if storage.is_url(path):
        return _open_remote_reader(path)
    path = storage.local_path(path)
    try:
        size: int | None = storage.file_size(path)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            hint = (
                "The file does not exist: check the path (was it moved or deleted after the file "
                f"list was built?), {_SKIP_HINT}."
            )
        elif isinstance(exc, PermissionError):
            hint = "Check the file's permissions."
        else:
            hint = _failure_hint(path, None)
        raise _error(path, exc, hint) from exc
    return _open_decoder(path, size, lambda: path)


def _open_remote_reader(url: str) -> _SoundfileReader | _PyAVReader:
    """Opens a URL through :mod:`audiotree.io.storage`: ranged reads, no download."""
    try:
        first = storage.open_input(url)
    except (ImportError, ValueError) as exc:
        raise AudioReadError(storage.redact(str(exc)), storage.redact(url)) from exc
    handles = [first]

    def reopen():
        # Each decoder attempt gets its own handle (a failed one may have
        # moved or closed it); the first is reused for the first attempt.
        if handles:
            return handles.pop()
        return storage.open_input(url)

    try:
        return _open_decoder(url, first.size, reopen)
    except BaseException:
        if not first.closed:
            first.close()
        raise


def _open_decoder(path: str, size: int | None, source) -> _SoundfileReader | _PyAVReader:
    """The decoder choice and fallbacks, for a local path or a remote file object.

    ``source()`` returns what the decoder opens (the path, or a fresh remote
    handle that the reader then owns).
    """
    ext = _extension(path)
    if ext in PYAV_EXTENSIONS:
        src = source()
        try:
            reader = _PyAVReader(path, src)
        except ImportError as exc:
            _close_source(src)
            hint = (
                f"Decoding {ext} files needs the optional PyAV package: install it with "
                "`pip install av` (or `pip install audiotree[av]`), or convert the file to WAV/FLAC."
            )
            raise _error(path, exc, hint) from exc
        except Exception as exc:
            _close_source(src)
            raise _error(path, exc, _failure_hint(path, size)) from exc
        return _checked(path, size, reader)

    src = source()
    try:
        reader = _SoundfileReader(path, src)
    except Exception as exc:
        sf_exc = exc
        _close_source(src)
    else:
        try:
            _check_source(src)
        except AudioReadError:
            reader.close()
            raise
        return _checked(path, size, reader)
    if not isinstance(src, str) and src.failure is not None:
        sf_exc = src.failure
    if isinstance(sf_exc, AudioReadError):  # a storage error (status named): no fallback helps
        raise sf_exc
    # libsndfile could not open it. PyAV may (unusual WAV codecs, misnamed
    # files), but an empty file is hopeless, and a fallback that "succeeds"
    # with no audio is treated as a failure rather than as a valid empty file.
    hint = _failure_hint(path, size)
    if size != 0 and pyav_available():
        src = source()
        try:
            reader = _PyAVReader(path, src)
        except Exception as av_exc:
            _close_source(src)
            hint = f"(The PyAV fallback also failed: {_describe(av_exc)}.) {hint}"
        else:
            if reader.info.frames > 0:
                return _checked(path, size, reader)
            reader.close()
    raise _error(path, sf_exc, hint) from sf_exc


def _checked(path: str, size: int | None, reader: _SoundfileReader | _PyAVReader):
    """``reader`` once its header's length claim is backed by the file, else closes it and raises."""
    try:
        if isinstance(reader, _SoundfileReader):
            _refuse_truncated_wav(path, size, reader)
        _check_length_claim(path, size, reader)
    except BaseException:
        reader.close()
        raise
    return reader


def _check_source(source: Any) -> None:
    """Raises the storage error a remote read hit inside the decoder (see storage.RemoteInput)."""
    if not isinstance(source, str):
        source.check()


def _close_source(source: Any) -> None:
    if not isinstance(source, str) and not source.closed:
        source.close()


def _wav_data_chunk(head: bytes) -> tuple[int, int] | None:
    """(offset, declared size) of a RIFF/WAVE file's ``data`` chunk, if ``head`` holds it."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(head):
        chunk_id, chunk_size = head[pos : pos + 4], struct.unpack_from("<I", head, pos + 4)[0]
        if chunk_id == b"data":
            return pos + 8, chunk_size
        pos += 8 + chunk_size + (chunk_size & 1)  # chunks are word-aligned
    return None


def _refuse_truncated_wav(path: str, size: int | None, reader: _SoundfileReader) -> None:
    """Raises AudioReadError when a WAV file ends before its ``data`` chunk does.

    libsndfile quietly reports only the frames that are present, so a cut-off
    download would otherwise read as a shorter file and be padded with silence.
    The check reads the header bytes only. Streaming writers that leave the
    size at 0 or 0xFFFFFFFF (unknown) are accepted.
    """
    if size is None or reader.info.format not in ("WAV", "WAVEX"):
        return
    try:
        chunk = _wav_data_chunk(_read_span(reader._source, 0, 65536))
    except OSError:
        return
    if chunk is None:
        return
    offset, declared = chunk
    if declared in (0, 0xFFFFFFFF) or offset + declared <= size:
        return
    raise AudioReadError(
        f"Failed to read audio file '{path}': the file is truncated: its header declares "
        f"{declared} bytes of audio but the file ends {offset + declared - size} bytes early "
        f"(only {reader.info.frames} frames are present). Re-download or re-encode it, {_SKIP_HINT}.",
        path,
    )


#: An MP3 without a Xing/Info/VBRI header has an *estimated* length: mpg123
#: derives it from the file size and the first frames' bitrate. Decoding may
#: end up to this many MPEG frames (0.2-0.3 s) before the estimate; that tail
#: is returned as silence so every read still has the promised length. A
#: decode that ends earlier is a truncated or corrupt file (AudioReadError).
#: MP3s with a length header are held to their exact length, like every other
#: format.
MP3_ESTIMATE_TOLERANCE_FRAMES = 8

# The frame count libsndfile reports for a FLAC stream whose STREAMINFO does
# not record its length (total_samples = 0).
_UNKNOWN_LENGTH = 2**63 - 1


def _bad_file(path: str, what: str) -> AudioReadError:
    return AudioReadError(
        f"Failed to read audio file '{path}': {what}. Re-download or re-encode it, {_SKIP_HINT}.", path
    )


def _check_length_claim(path: str, size: int | None, reader: _SoundfileReader | _PyAVReader) -> None:
    """Refuses a header whose frame count the file's bytes cannot back (see io.integrity).

    Runs before anything is decoded or allocated. Reads the final page of an
    Ogg file, a 4 KiB head of an MP3 (or of a file whose claim is too large
    for its format's smallest blocks), and 1 MiB of a file claiming 0 frames
    (to tell an empty file from a cut one); nothing for typical WAV/FLAC.
    """
    info = reader.info
    if not 1 <= info.sample_rate <= integrity.MAX_SAMPLE_RATE:
        raise _bad_file(path, f"its header claims a sample rate of {info.sample_rate} Hz, outside "
                        f"1-{integrity.MAX_SAMPLE_RATE} Hz; the header is corrupt")
    fmt, subtype = info.format, info.subtype
    is_mpeg = fmt == "MP3" or (subtype or "").startswith("MPEG_LAYER")
    try:
        size = os.stat(path).st_size if size is None else size
        # The head is read only when a check needs it: MP3 (its Xing header),
        # 0-frame claims, and claims too large for the format's smallest blocks.
        bound = None if info.frames == 0 else integrity.max_frames(
            fmt, subtype, info.channels, info.sample_rate, size, None
        )
        head = b""
        if info.frames == 0:
            head = _read_span(reader._source, 0, 1 << 20)
        elif is_mpeg or (bound is not None and info.frames > bound):
            head = _read_span(reader._source, 0, 4096)
        if fmt == "OGG":
            tail = _read_span(reader._source, max(0, size - integrity.OGG_MAX_PAGE), integrity.OGG_MAX_PAGE)
        id3 = integrity.id3v2_size(head) if is_mpeg else 0
        if is_mpeg:  # the first MPEG frame, where a Xing/Info/VBRI header sits
            frame_head = head[id3:] if id3 + 200 <= len(head) else _read_span(reader._source, id3, 200)
    except OSError:  # the file vanished after opening: the first read will say so
        return
    if fmt == "OGG" and not integrity.ogg_is_complete(tail):
        raise _bad_file(path, "the file is truncated: its Ogg stream ends without an end-of-stream page "
                        f"(libsndfile sees {info.frames} frames; the rest is missing)")
    # Encoders count the stream from its first frame; compared with the whole
    # file size (ID3v2 tag included) so that no encoder's convention can make
    # a complete file look cut. Smaller cuts are caught by the exact length.
    declared = integrity.mp3_declared_bytes(frame_head) if is_mpeg else None
    if declared is not None and declared > size:
        raise _bad_file(path, f"the file is truncated: its Xing/Info header records {declared} bytes of MPEG "
                        f"audio but the file has only {size} bytes")
    if info.frames == 0:
        wav_data = _wav_data_chunk(head) if fmt in ("WAV", "WAVEX") else None
        # PyAV containers that report no frames are refused like the PyAV
        # fallback's (see _open_reader): their length metadata is all we have.
        if isinstance(reader, _PyAVReader) or integrity.holds_audio(fmt, subtype, head, size, wav_data):
            raise _bad_file(path, f"its header claims 0 frames but the file ({size} bytes) holds audio data "
                            "after its header; it is truncated or its header is corrupt")
        return
    if bound is not None and info.frames > bound:
        bound = integrity.max_frames(fmt, subtype, info.channels, info.sample_rate, size, head)
    if bound is not None and info.frames > bound:
        if fmt == "FLAC" and info.frames == _UNKNOWN_LENGTH:
            raise _bad_file(path, "its FLAC header does not record the stream length (total_samples is 0), "
                            "so reads cannot be checked or positioned exactly")
        raise _bad_file(path, f"its header claims {info.frames} frames but a {size}-byte {fmt} file "
                        f"holds at most {bound}; the header is corrupt")
    if isinstance(reader, _SoundfileReader) and is_mpeg and integrity.mp3_length_is_estimated(frame_head):
        reader.length_slack = MP3_ESTIMATE_TOLERANCE_FRAMES * (reader._preroll // _MPEG_PREROLL_FRAMES)


# Containers whose decoders locate a position by reading around the file.
_PROBING_SEEKS = frozenset({"FLAC", "OGG", "MP3"})


class AudioFile:
    """An audio file opened once for repeated excerpt reads.

    ``AudioFile(path)`` opens the file with libsndfile, or with PyAV for
    container formats libsndfile cannot read (and as a fallback when
    libsndfile fails on a file and ``av`` is installed). ``path`` may be a URL
    (``s3://``, ``gs://``, ``https://``, ...; see :mod:`audiotree.io.storage`),
    read with ranged requests; ``storage_options`` are then the fsspec
    filesystem's options. Use it as a context manager or call :meth:`close`. Instances are not thread-safe; give each
    worker thread its own.

    Attributes:
        path: The file path (``str``).
        info: The :class:`AudioInfo` read from the header.
        backend: ``"soundfile"`` or ``"pyav"``.

    Raises:
        AudioReadError: if the file is missing, empty, unreadable or corrupt;
            the message names the file, the cause and what to do.
    """

    __slots__ = ("path", "info", "backend", "_reader")

    def __init__(self, path: str | os.PathLike[str], *, storage_options: dict | None = None) -> None:
        self.path: str = os.fsdecode(path)
        self._reader: _SoundfileReader | _PyAVReader | None = None
        if storage_options:
            with storage.use_storage_options(storage_options):
                reader = _open_reader(self.path)
        else:
            reader = _open_reader(self.path)
        self._reader = reader
        self.info: AudioInfo = reader.info
        self.backend: str = reader.backend

    def __enter__(self) -> AudioFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._reader is None else self.backend
        return f"AudioFile({self.path!r}, {state})"

    @property
    def closed(self) -> bool:
        return self._reader is None

    def close(self) -> None:
        """Release the decoder. Idempotent."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def read(self, start_frame: int, num_frames: int | None = None) -> np.ndarray:
        """Decode ``num_frames`` frames starting at frame ``start_frame``.

        Only the requested span is decoded (plus, for lossy codecs, a short
        codec-specific pre-roll needed for exact output; see the module
        docstring).

        Args:
            start_frame: First frame to return, ``>= 0``.
            num_frames: Number of frames, ``>= 0``; ``None`` reads to the end.

        Returns:
            ``float32`` array of shape ``(frames, channels)``, C-contiguous.
            Near the end of the file fewer than ``num_frames`` frames are
            returned; if ``start_frame >= info.frames`` the result has 0 rows
            (callers that need a full excerpt should check the length and
            report the file's duration).

        Raises:
            ValueError: for negative arguments or a closed file.
            AudioReadError: if decoding fails, ends before the frames the
                header promises (a truncated or corrupt file), runs out of
                memory, or the samples contain NaN/Inf.
        """
        reader = self._reader
        if reader is None:
            raise ValueError(f"I/O operation on closed AudioFile ({self.path!r}).")
        start = operator.index(start_frame)
        if start < 0:
            raise ValueError(f"start_frame must be >= 0, got {start}.")
        frames = self.info.frames
        if num_frames is None:
            end = frames
        else:
            count = operator.index(num_frames)
            if count < 0:
                raise ValueError(f"num_frames must be >= 0 or None, got {count}.")
            end = min(frames, start + count)
        if start >= end:
            return np.empty((0, self.info.channels), dtype=np.float32)
        source = reader._source
        if not isinstance(source, str) and frames > 0 and self.info.format not in _PROBING_SEEKS:
            # Uncompressed audio seeks straight to its bytes: fetch the excerpt
            # (its share of the file, +5%) in one ranged request. Codecs whose
            # seek probes the file first would spend the hint on a probe.
            source.expect(int(source.size * (end - start) / frames * 1.05))
        try:
            x = reader.read(start, end - start)
            _check_source(source)
        except AudioReadError:
            raise
        except MemoryError as exc:
            gib = (end - start) * self.info.channels * 4 / 2**30
            raise AudioReadError(
                f"Failed to read audio file '{self.path}': not enough memory to decode frames {start}-{end} "
                f"({gib:.2f} GiB as float32). Read shorter excerpts, {_SKIP_HINT}.",
                self.path,
            ) from exc
        except Exception as exc:
            raise _error(self.path, exc, _failure_hint(self.path, _file_size(self.path))) from exc
        if len(x) != end - start:
            x = self._short_read(x, start, end, reader.length_slack)
        _check_finite(x, self.path, start)
        return x

    def _short_read(self, x: np.ndarray, start: int, end: int, slack: int) -> np.ndarray:
        """A decode that ended at frame ``start + len(x)`` before ``end``: pad within ``slack`` or raise.

        Only an estimated length (``slack > 0``) may come up short, and only
        near its estimated end; anything else means the file holds fewer
        frames than its header promises.
        """
        stopped = start + len(x)
        frames = self.info.frames
        if frames - stopped <= slack:
            out = np.zeros((end - start, self.info.channels), dtype=np.float32)
            out[: len(x)] = x
            return out
        if slack:
            what = (f"its length is estimated at {frames} frames (the MP3 has no Xing/Info header) but decoding "
                    f"stopped at frame {stopped}, more than the {slack}-frame tolerance short; it is truncated or "
                    "corrupt")
        else:
            what = (f"decoding stopped at frame {stopped} but its header promises {frames} frames; "
                    "it is truncated or corrupt")
        raise _bad_file(self.path, what)

    def read_all(self) -> np.ndarray:
        """Decode the whole file: ``read(0, None)``; shape ``(frames, channels)``."""
        return self.read(0, None)


def probe(path: str | os.PathLike[str], *, storage_options: dict | None = None) -> AudioInfo:
    """Read a file's header without decoding any audio.

    One open of the file (libsndfile, or PyAV for its formats). For
    libsndfile formats ``frames`` is exact (for Ogg it comes from the last
    page's granule position, for MP3 from the LAME/Xing header when present).
    For PyAV files it comes from the stream duration (exact for MP4/M4A,
    whose edit list already hides AAC encoder priming and padding), else the
    container duration (which FFmpeg may estimate from the bitrate), else
    the packet durations found by demuxing the file without decoding it
    (raw ADTS ``.aac``).

    Raises:
        AudioReadError: if the file cannot be opened as audio.
    """
    with AudioFile(path, storage_options=storage_options) as f:
        return f.info


def read_frames(
    path: str | os.PathLike[str], start_frame: int = 0, num_frames: int | None = None
) -> tuple[np.ndarray, AudioInfo]:
    """Open ``path``, read one excerpt and close it.

    Returns:
        ``(samples, info)`` where ``samples`` is ``float32`` of shape
        ``(frames, channels)`` as returned by :meth:`AudioFile.read`.
    """
    with AudioFile(path) as f:
        return f.read(start_frame, num_frames), f.info

"""The FFmpeg decoder through PyAV (M4A/AAC, WMA, ...): timestamp-placed seeks with pre-roll.

Workarounds (measured with PyAV 18)
    * PyAV (AAC etc.): after a seek the first decoded frame lacks its MDCT
      overlap, and ``flush_buffers`` does not reset all decoder state. We
      pre-roll, trim by frame timestamps, and decode reads that start at
      the very beginning with a freshly opened decoder.

Placement precision
    A read that starts at frame 0 counts decoded samples and is exact. After a
    seek, the first frame is placed by its timestamp where timestamps count
    samples (MP4/M4A, most audio containers). Matroska and WebM tick in
    milliseconds (48 samples at 48 kHz), and FFmpeg's Opus decoder re-applies
    its pre-skip after a flush, so there a timestamp alone could be off by
    more than a sample. But every Opus packet lasts a multiple of 2.5 ms, and
    every packet of a fixed-frame codec (AAC) the same number of samples, so a
    packet starts on a grid (less the decoder's delay) whose step is more than
    twice a tick: the timestamp names the exact start, and the first frame
    after a seek is placed where its packet ends (its length read from the
    Opus TOC byte). The stream's length is where its last packet ends, less
    the end trim of its ``skip_samples`` side data. A codec with no such grid
    (Vorbis in WebM) is read from the start instead: exact, at the cost of
    decoding everything before the excerpt.
    Raw ADTS/AC-3 streams have no length header (FFmpeg estimates one from the
    bitrate), so their packets are counted once (cached per local file).
"""

from __future__ import annotations

import os
from fractions import Fraction
from typing import Any

import numpy as np

from audiotree.io.byte_reads import read_span
from audiotree.io.read_errors import bad_file
from audiotree.io.info import AudioInfo
from audiotree.io.byte_cache import memoized

__all__ = ["PyAVReader"]

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


def _check_packet_count(fmt_name: str, stream: Any, frame_size: int, frames: int) -> None:
    """Raises ValueError when an MP4 track's duration (``mdhd``) is shorter than its packets hold.

    The sample table counts the packets; each decodes to ``frame_size``
    samples (1024 for AAC). Priming (1024-2112 samples) and the final
    frame's padding stay within three frames; a header cut to half the
    length does not. Nothing is decoded.
    """
    packets = int(stream.frames or 0)
    if fmt_name != "MOV" or packets <= 0 or frame_size <= 0:
        return
    held = packets * frame_size
    if frames < held - 3 * frame_size:
        raise ValueError(f"its track header claims {frames} frames but its {packets} packets of {frame_size} samples "
                         f"hold {held}; the header is corrupt")


# An AAC frame holds at most 6144 bits per channel (ISO/IEC 14496-3).
_AAC_MAX_BYTES_PER_CHANNEL = 768


def _check_media_size(source: Any, packets: int, channels: int) -> None:
    """Raises ValueError when an MP4's media data holds more bytes than its listed AAC packets can.

    A damaged sample table that lists too few packets makes FFmpeg read the
    file as shorter. Only the top-level box headers are read (``mdat``
    sizes), at most 64 of them.
    """
    if packets <= 0:
        return
    media, offset = 0, 0
    for _ in range(64):
        header = read_span(source, offset, 16)
        if len(header) < 8:
            break
        size, kind = int.from_bytes(header[:4], "big"), header[4:8]
        if size == 1 and len(header) == 16:
            size = int.from_bytes(header[8:16], "big")
        elif size == 0:  # the box runs to the end of the file
            if isinstance(source, str):
                end = os.path.getsize(source)
            else:
                saved = source.tell()
                end = source.seek(0, os.SEEK_END)
                source.seek(saved)
            size = end - offset
        if size < 8:
            break
        if kind == b"mdat":
            media += size - 8
        offset += size
    if media > packets * _AAC_MAX_BYTES_PER_CHANNEL * channels + 4096:
        raise ValueError(f"its sample table lists {packets} AAC packets, but its media data holds {media} bytes, more "
                         "than that many packets can; the sample table is corrupt")


# Raw elementary streams: no container length, FFmpeg estimates one from the bitrate.
_RAW_STREAMS = frozenset({"AAC", "AC3", "EAC3"})

# Opus frame lengths in 48 kHz samples by TOC configuration (RFC 6716 3.1):
# SILK 10/20/40/60 ms, hybrid 10/20 ms, CELT 2.5/5/10/20 ms.
_OPUS_FRAME = [480, 960, 1920, 2880] * 3 + [480, 960] * 2 + [120, 240, 480, 960] * 4


def _opus_packet_samples(data: bytes) -> int | None:
    """48 kHz samples in one Opus packet, from its TOC byte (and frame count byte), or None if malformed."""
    if not data:
        return None
    toc = data[0]
    code = toc & 3
    if code == 3:
        if len(data) < 2:
            return None
        count = data[1] & 0x3F
    else:
        count = 1 if code == 0 else 2
    return _OPUS_FRAME[toc >> 3] * count


def _trimmed(packet: Any) -> tuple[int, int] | None:
    """(samples skipped at the start, discarded at the end) of a packet's output by its side data, or None."""
    try:
        if not packet.has_sidedata("skip_samples"):
            return None
        data = bytes(packet.get_sidedata("skip_samples"))
    except (AttributeError, TypeError, ValueError):  # an older PyAV without packet side data
        return None
    if len(data) < 8:
        return None
    return int.from_bytes(data[:4], "little"), int.from_bytes(data[4:8], "little")


def _raw_packet_frames(container: Any, stream: Any) -> int:
    """Sum of the packet durations of a stream, in its time base, by demuxing it (nothing is decoded)."""
    return sum(int(packet.duration or 0) for packet in container.demux(stream))


@memoized("pyav_packet_frames", max_entries=1024)
def _cached_raw_packet_frames(path: str, size: int, mtime_ns: int) -> int:
    """:func:`_raw_packet_frames` of a local file's first audio stream, once per path, size and mtime."""
    import av

    with av.open(path, mode="r") as container:
        return _raw_packet_frames(container, container.streams.audio[0])


class PyAVReader:
    """A PyAV (FFmpeg) container opened once, read with sample-aligned seeks."""

    backend = "pyav"

    __slots__ = (
        "_path",
        "source",
        "_dirty",
        "_container",
        "_stream",
        "_codec",
        "info",
        "_rate",
        "_tb_num",
        "_tb_den",
        "_origin",
        "preroll",
        "_jitter",
        "length_slack",
        "_packer",
        "_grid",
        "_lead",
        "_zero",
    )

    def __init__(self, path: str, source: Any = None) -> None:
        self._path = path
        self.source = path if source is None else source  # path or open remote file object
        self._dirty = False
        self._packer = None  # an av.AudioResampler, made for the first frame of > 8 planes
        self.length_slack = 0  # raised by _duration_frames when the length is an estimate
        self._grid = 0  # coarse timestamps: packets start on this grid of samples (0: unknown, count from 0)
        self._lead = 0  # ... offset by this much (the decoder's delay)
        self._zero = 0  # ... counted from this timestamp position (that of the first output sample)
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
            fmt_name = (container.format.name or "").split(",")[0].upper()
            frame_size = int(codec.frame_size or 0)
            if self._jitter > 2:  # timestamps coarser than a sample: place packets on their grid
                frames = self._grid_length(frame_size)
            else:
                frames = self._duration_frames(container, stream, sample_rate, fmt_name in _RAW_STREAMS)
            # Pre-roll covers decoder warm-up after a flush: one codec frame
            # is enough for AAC's MDCT overlap (measured); 0.1 s also covers
            # Opus (80 ms recommended) and Vorbis long blocks.
            self.preroll = max(2 * frame_size, -(-sample_rate // 10), 4096)
            _check_packet_count(fmt_name, stream, frame_size, frames)
            if fmt_name == "MOV" and codec.name == "aac":
                _check_media_size(self.source, int(stream.frames or 0), channels)
            self.info = AudioInfo(path, frames, sample_rate, channels, fmt_name, (codec.name or "").upper() or None)
        except BaseException:
            container.close()
            raise

    def _open_container(self) -> None:
        import av  # deferred: importing FFmpeg is slow and optional

        if not isinstance(self.source, str):
            self.source.seek(0)  # a re-open (fresh decoder) starts from the top
        container = av.open(self.source, mode="r")
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

    def _grid_length(self, frame_size: int) -> int:
        """Length in frames of a stream with coarse timestamps; sets the packet grid when there is one.

        Every packet of an Opus stream lasts a multiple of 2.5 ms (120 samples
        at 48 kHz), every packet of a fixed-frame codec (AAC) ``frame_size``
        samples, so packet ``k`` starts at a multiple of that grid less the
        decoder's delay. A timestamp within half a grid step of the truth (a
        millisecond tick is 48 samples) therefore names the exact start. The
        length is where the last packet ends (its ``skip_samples`` side data
        trims the end), found by a seek near the end; without a grid it is the
        container's duration.
        """
        codec = self._codec
        delay = int(getattr(codec, "delay", 0) or 0)
        if codec.name == "opus" and (120 * self._rate) % 48000 == 0:
            grid = 120 * self._rate // 48000
        else:
            grid = frame_size
        if grid <= 0 or 2 * self._to_samples(1) >= grid:
            return self._duration_frames(self._container, self._stream, self._rate, False)
        end = None
        try:
            container, stream = self._container, self._stream
            self._dirty = True
            first = next((packet for packet in container.demux(stream) if packet.pts is not None), None)
            if first is None:
                return self._duration_frames(container, stream, self._rate, False)
            # Packet 0 starts `skip` samples before the first output sample (its start trim, else the delay).
            trim = _trimmed(first)
            skip = trim[0] if trim else delay
            zero = self._frame_position(int(first.pts)) + skip
            # FFmpeg's muxers put timestamp 0 at the first output sample (packet 0 at -skip, rounded): keep it.
            self._grid, self._lead, self._zero = grid, -skip % grid, 0 if abs(zero) <= self._to_samples(1) else zero
            if container.duration:
                target = container.duration * self._tb_den // (1_000_000 * self._tb_num) - self._tb_den // self._tb_num
                container.seek(max(0, target) + self._origin, stream=stream, backward=True, any_frame=False)
            for packet in container.demux(stream):
                samples = self._packet_samples(packet)
                if packet.pts is not None and samples:
                    trim = _trimmed(packet)
                    end = self._grid_start(int(packet.pts)) + samples - (trim[1] if trim else 0)
        except Exception:  # noqa: BLE001 - any demuxer trouble: fall back to the container's duration
            end = None
        if end is None:
            return self._duration_frames(self._container, self._stream, self._rate, False)
        return max(0, end)

    def _packet_samples(self, packet: Any) -> int | None:
        """Samples a packet decodes to (before trims), if known without decoding it."""
        if self._codec.name == "opus":
            return _opus_packet_samples(bytes(packet))
        return int(self._codec.frame_size or 0) or None

    def _grid_start(self, pts: int) -> int:
        """Exact first sample of the packet with timestamp ``pts`` (see :meth:`_grid_length`)."""
        approx = self._frame_position(pts) - self._zero
        step = (self._lead - approx) % self._grid
        return approx + (step - self._grid if 2 * step > self._grid else step)

    def _duration_frames(self, container: Any, stream: Any, sample_rate: int, raw: bool) -> int:
        """Stream length in frames, from metadata (no decoding).

        Preference: the stream duration (exact for MP4/M4A, where it comes
        from the edit list and so already excludes encoder priming/padding);
        else the container duration (may be a bitrate estimate); else the sum
        of packet durations from demuxing (reads the file but decodes
        nothing; what ``raw`` streams such as ADTS ``.aac`` always use: their
        durations are FFmpeg's estimates from the bitrate).
        """
        if raw and isinstance(self.source, str):  # counted once per local file
            st = os.stat(self.source)
            return self._to_samples(_cached_raw_packet_frames(self.source, st.st_size, st.st_mtime_ns))
        if not raw and stream.duration is not None and stream.duration > 0:
            return self._to_samples(int(stream.duration))
        if not raw and container.duration is not None and container.duration > 0:
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
        if not isinstance(self.source, str):
            self.source.close()

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
            for frame in codec.decode(packet):
                yield packet, frame

    def _as_frames_by_channels(self, frame: Any, channels: int) -> np.ndarray:
        """Frame samples as (samples, channels) in their native dtype (a view when possible)."""
        got = frame.layout.nb_channels  # per frame: not len(.channels), which builds objects
        if got != channels:
            raise bad_file(self._path, f"a decoded frame has {got} channels but the stream declares {channels}")
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
            raise bad_file(self._path, f"interleaving a {frame.layout.nb_channels}-channel frame of {frame.samples} "
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
        seek_frame: int | None = max(0, start - self.preroll)
        grid = self._grid
        if not grid and self._jitter > 2:
            seek_frame = None  # coarse timestamps and no packet grid: count from the start
        while True:
            from_beginning = seek_frame is None or seek_frame == 0
            expected: int | None = None
            overshot = False
            shift = 0
            for packet, frame in self._decode_from(seek_frame):
                n = frame.samples
                samples = self._packet_samples(packet) if grid and expected is None and not from_beginning else None
                if samples and packet.pts is not None:
                    # Its packet's exact start on the grid. FFmpeg re-applies the Opus pre-skip to the first packet
                    # after a flush, so an Opus frame ends where its packet does; other decoders trim nothing.
                    pos = self._grid_start(int(packet.pts)) + (samples - n if self._codec.name == "opus" else 0)
                elif frame.pts is not None:
                    pos = self._frame_position(int(frame.pts))
                    if from_beginning and self._jitter > 2:
                        # Coarse timestamps count from the first frame's (Vorbis in WebM starts at 3 ms): no gap.
                        shift = pos if expected is None else shift
                        pos -= shift
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
                    raise bad_file(self._path, f"decoding skipped frames {max(expected, start)}-{min(pos, end)} "
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
